"""What a compiled module would run before any of its kernels is launched, read from the ELF
file itself (64-bit little-endian: x86-64 and AArch64 Linux), without running it.

A shared object runs code of its own when it is loaded: the functions its ``.init_array``,
``.preinit_array`` and ``.ctors`` list (global constructors, ``__attribute__((constructor))``,
C++ objects with a dynamic initialiser), its ``.init`` section (``DT_INIT``), and the resolvers of
its indirect functions (``STT_GNU_IFUNC`` symbols, ``R_*_IRELATIVE`` relocations), which the
dynamic linker calls while relocating; it may also name libraries to load with it
(``DT_NEEDED``) or an auditor (``DT_AUDIT``). :func:`profile` counts each of these, so that a
module can be compared with one the CPU backend compiled from a clean kernel
(:func:`gpulab.cpu.compiler.load_time_code`): a student's kernel file has no business adding any.
:func:`object_symbols` lists a relocatable object's symbols, so that a module can be checked to
define none of the names the runtime linked beside it defines or calls.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

# e_machine
_X86_64, _AARCH64 = 62, 183
# Section types, dynamic tags, symbol types and bindings, relocation types (elf.h)
_SHT_SYMTAB, _SHT_RELA, _SHT_DYNAMIC, _SHT_REL, _SHT_DYNSYM = 2, 4, 6, 9, 11
_DT_NEEDED, _DT_INIT, _DT_FINI, _DT_INIT_ARRAYSZ, _DT_FINI_ARRAYSZ, _DT_PREINIT_ARRAYSZ = 1, 12, 13, 27, 28, 33
_DT_AUXILIARY, _DT_FILTER, _DT_AUDIT, _DT_DEPAUDIT = 0x7ffffffd, 0x7fffffff, 0x6ffffefc, 0x6ffffefb
_STT_GNU_IFUNC = 10
_IRELATIVE = {_X86_64: 37, _AARCH64: 1032}
_SHN_UNDEF = 0
_STB_LOCAL, _STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE = 0, 1, 2, 10


#: Libraries every module may need, whatever the control needs: the C, maths and C++ runtimes that
#: the link command (gpulab.cpu.compiler) names, already loaded in the process that loads a module.
TOOLCHAIN_LIBRARIES = ("libc.so.", "libm.so.", "libmvec.so.", "libdl.so.", "libpthread.so.", "libstdc++.so.",
                       "libgcc_s.so.", "ld-linux")


class NotElf(ValueError):
    """The file is not a 64-bit little-endian ELF file of a processor this module reads."""


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    kind: int           # STT_*
    binding: int        # STB_*
    section: int        # st_shndx: 0 undefined

    @property
    def defined(self) -> bool:
        return self.section != _SHN_UNDEF

    @property
    def strong(self) -> bool:
        """Defined with a binding that overrides a weak (inline, template) definition elsewhere."""
        return self.defined and self.binding in (_STB_GLOBAL, _STB_GNU_UNIQUE)


@dataclass
class Profile:
    """What a shared object runs or loads when it is loaded, counted."""

    init_array: int = 0          # entries of .init_array (with .ctors, which the linker merges in)
    preinit_array: int = 0
    fini_array: int = 0
    init_bytes: int = 0          # size of the .init section DT_INIT points into (0: no DT_INIT)
    fini_bytes: int = 0
    ifuncs: int = 0              # STT_GNU_IFUNC symbols (their resolvers run while relocating)
    irelative: int = 0           # IRELATIVE relocations (a local indirect function's resolver)
    ctors: int = 0               # entries of a .ctors section left unmerged (beyond its two markers)
    needed: tuple[str, ...] = ()
    auditors: tuple[str, ...] = ()
    symbols: dict = field(default_factory=dict, repr=False)   # name -> Symbol (defined ones)
    sections: dict = field(default_factory=dict, repr=False)  # name -> (address, size)

    def beyond(self, control: "Profile") -> list[str]:
        """What this profile has that ``control`` has not, in words (empty: nothing)."""
        more = []
        for attribute, words in (("init_array", "global constructor(s) (.init_array)"),
                                 ("preinit_array", "pre-initialisation function(s) (.preinit_array)"),
                                 ("ctors", "global constructor(s) (.ctors)"),
                                 ("fini_array", "global destructor(s) (.fini_array)"),
                                 ("ifuncs", "indirect function(s) whose resolver runs at load (ifunc)"),
                                 ("irelative", "indirect function(s) whose resolver runs at load (IRELATIVE)")):
            extra = getattr(self, attribute) - getattr(control, attribute)
            if extra > 0:
                more.append(f"{extra} {words}")
        for attribute, words in (("init_bytes", ".init"), ("fini_bytes", ".fini")):
            if getattr(self, attribute) > getattr(control, attribute):
                more.append(f"code added to the {words} section")
        # The link names the toolchain's libraries only; which of them a module needs depends on
        # what it calls (expf: libm), not on code of its own.
        libraries = sorted(n for n in set(self.needed) - set(control.needed)
                           if not n.startswith(TOOLCHAIN_LIBRARIES))
        if libraries:
            more.append(f"libraries loaded with it ({', '.join(libraries)})")
        if self.auditors:
            more.append(f"an auditor library ({', '.join(self.auditors)})")
        return more


def _header(data: bytes):
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise NotElf("not a 64-bit little-endian ELF file")
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine not in (_X86_64, _AARCH64):
        raise NotElf(f"an ELF file for machine {machine}, not x86-64 or AArch64")
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
    if shoff == 0 or shentsize != 64 or shoff + shnum * 64 > len(data):
        raise NotElf("an ELF file without a readable section table")
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * 64) for i in range(shnum)]
    names = sections[shstrndx] if shstrndx < shnum else None
    return machine, sections, names


def _string(data: bytes, table, offset: int) -> str:
    start = table[4] + offset
    end = data.find(b"\0", start, table[4] + table[5])
    return data[start:end if end >= 0 else table[4] + table[5]].decode(errors="replace")


def _symbols(data: bytes, sections, kinds=(_SHT_SYMTAB, _SHT_DYNSYM)) -> list[Symbol]:
    found = []
    for sh in sections:
        if sh[1] not in kinds or sh[9] != 24 or sh[6] >= len(sections):
            continue
        strings = sections[sh[6]]
        for at in range(sh[4], sh[4] + sh[5] - 23, 24):
            name, info, _, shndx, value, size = struct.unpack_from("<IBBHQQ", data, at)
            found.append(Symbol(_string(data, strings, name), value, size, info & 0xF, info >> 4, shndx))
    return found


def object_symbols(data: bytes) -> list[Symbol]:
    """The symbols of an ELF file's ``.symtab`` (a relocatable object's: what it defines, what
    it needs)."""
    _, sections, _ = _header(data)
    return _symbols(data, sections, (_SHT_SYMTAB,))


def profile(data: bytes) -> Profile:
    """What the shared object ``data`` (its bytes) runs and loads when it is loaded."""
    machine, sections, names = _header(data)
    named = {}
    for sh in sections:
        if names is not None:
            named[_string(data, names, sh[0])] = sh
    out = Profile()
    dynamic = [sh for sh in sections if sh[1] == _SHT_DYNAMIC]
    dynstr = sections[dynamic[0][6]] if dynamic and dynamic[0][6] < len(sections) else None
    init_at = fini_at = None
    for sh in dynamic:
        for at in range(sh[4], sh[4] + sh[5] - 15, 16):
            tag, value = struct.unpack_from("<qQ", data, at)
            if tag == 0:
                break
            if tag == _DT_INIT_ARRAYSZ:
                out.init_array = value // 8
            elif tag == _DT_PREINIT_ARRAYSZ:
                out.preinit_array = value // 8
            elif tag == _DT_FINI_ARRAYSZ:
                out.fini_array = value // 8
            elif tag == _DT_INIT:
                init_at = value
            elif tag == _DT_FINI:
                fini_at = value
            elif tag == _DT_NEEDED and dynstr is not None:
                out.needed += (_string(data, dynstr, value),)
            elif tag in (_DT_AUDIT, _DT_DEPAUDIT, _DT_AUXILIARY, _DT_FILTER):
                out.auditors += (_string(data, dynstr, value) if dynstr is not None else str(value),)
    # DT_INIT and DT_FINI point into the code the loader runs: the whole section holding each
    # (crti's prologue, what objects added, crtn's epilogue), by its size.
    for address, attribute in ((init_at, "init_bytes"), (fini_at, "fini_bytes")):
        if address is None:
            continue
        holding = [sh for sh in sections if sh[3] <= address < sh[3] + sh[5] and sh[2] & 0x4]   # SHF_EXECINSTR
        setattr(out, attribute, holding[0][5] if holding else 1 << 30)
    ctors = named.get(".ctors")
    if ctors is not None:
        out.ctors = max(0, ctors[5] // 8 - 2)
    irelative = _IRELATIVE[machine]
    for sh in sections:
        if sh[1] == _SHT_RELA and sh[9] == 24:
            out.irelative += sum((struct.unpack_from("<Q", data, at + 8)[0] & 0xFFFFFFFF) == irelative
                                 for at in range(sh[4], sh[4] + sh[5] - 23, 24))
        elif sh[1] == _SHT_REL and sh[9] == 16:
            out.irelative += sum((struct.unpack_from("<Q", data, at + 8)[0] & 0xFFFFFFFF) == irelative
                                 for at in range(sh[4], sh[4] + sh[5] - 15, 16))
    for symbol in _symbols(data, sections):
        if symbol.kind == _STT_GNU_IFUNC and symbol.defined:
            out.ifuncs += 1
        if symbol.defined and symbol.name:
            out.symbols.setdefault(symbol.name, symbol)
    out.sections = {name: (sh[3], sh[5]) for name, sh in named.items() if name}
    return out
