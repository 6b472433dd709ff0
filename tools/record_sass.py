"""Record the SASS the book shows, for machines without NVRTC and cuobjdump (the GPU image has no
cuobjdump): one listing per kernel file under labdata/sass/, with the tools' versions and the date.

    python tools/record_sass.py            # every file in FILES
Needs nvidia-cuda-nvrtc, nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (requirements.txt).
"""
from gpulab import sass

#: The kernel files whose machine code a chapter shows.
FILES = ("basics/04_divergence.cu", "training/06_restrict_readonly.cu", "training/07_register_tiles.cu")

if __name__ == "__main__":
    for path in FILES:
        print(sass.record(path))
