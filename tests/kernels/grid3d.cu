// Writes each voxel's coordinates, encoded, using a 3D grid of 3D blocks.
extern "C" __global__ void label_voxels(int nx, int ny, int nz, int* out)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x < nx && y < ny && z < nz) {
        out[(z * ny + y) * nx + x] = x + 1000 * y + 1000000 * z;
    }
}
