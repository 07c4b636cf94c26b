#!/usr/bin/env python3
"""Stub shared libraries for the CUDA libraries that PyPI's Linux torch wheel links
against, so that `import torch` works for CPU use (torch.save / torch.load) without
the several GB of nvidia-* / cuda-toolkit wheels. Every stub defines each symbol torch
imports from that library (in the library's symbol version node) as a function that
returns 100 (cudaErrorNoDevice); nothing CUDA is ever called by the fixture scripts.

    torch_cuda_stubs.py TORCH_LIB_DIR OUT_DIR     (then LD_LIBRARY_PATH=OUT_DIR)

Used by torch_cpu.sh; needs gcc, nm and readelf (binutils).
"""
import collections
import os
import subprocess
import sys

SYSTEM = ('libc.so', 'libm.so', 'libdl.so', 'libpthread.so', 'librt.so', 'libstdc++', 'libgcc_s', 'ld-linux',
          'libgomp', 'libgfortran', 'libquadmath', 'libz.so')


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def dynamic_symbols(path, flag):
    out = []
    for line in run('nm', '-D', flag, path).splitlines():
        if line.split():
            out.append(line.split()[-1])
    return out


def main(lib, out):
    files = [os.path.join(lib, f) for f in os.listdir(lib) if '.so' in f]
    top = os.path.dirname(lib.rstrip('/'))
    files += [os.path.join(top, f) for f in os.listdir(top) if f.startswith('_C') and f.endswith('.so')]
    needed, undef, defined = set(), collections.defaultdict(set), set()
    for f in files:
        for line in run('readelf', '-d', f).splitlines():
            if '(NEEDED)' in line:
                needed.add(line.split('[')[1].split(']')[0])
        for s in dynamic_symbols(f, '--undefined-only'):
            name, _, ver = s.partition('@')
            undef[ver.lstrip('@')].add(name)
        defined.update(s.split('@')[0] for s in dynamic_symbols(f, '--defined-only'))
    present = set(os.listdir(lib))
    missing = sorted(n for n in needed if n not in present and not n.startswith(SYSTEM))
    sysdefs = set()
    for s in ['libc.so.6', 'libm.so.6', 'libstdc++.so.6', 'libgcc_s.so.1', 'libz.so.1']:
        path = os.path.join('/lib/x86_64-linux-gnu', s)
        if os.path.exists(path):
            sysdefs.update(x.split('@')[0] for x in dynamic_symbols(path, '--defined-only'))
    # Unversioned imports that nothing else provides (nccl, cufile, ...) go into one stub.
    loose = sorted(undef[''] - defined - sysdefs -
                   {'__gmon_start__', '_ITM_registerTMCloneTable', '_ITM_deregisterTMCloneTable'})
    os.makedirs(out, exist_ok=True)
    for i, soname in enumerate(missing):
        nodes = {}
        if undef.get(soname):
            nodes[soname] = sorted(undef[soname])
        if soname.startswith('libnvshmem') and undef.get('NVSHMEM'):
            nodes['NVSHMEM'] = sorted(undef['NVSHMEM'])
        extra = loose if i == 0 else []
        src = os.path.join(out, soname + '.c')
        vmap = os.path.join(out, soname + '.map')
        with open(src, 'w') as fc:
            for s in sorted(set(sum(nodes.values(), [])) | set(extra)):
                fc.write(f'int {s}(void) {{ return 100; }}\n')
        with open(vmap, 'w') as fv:
            for n, ss in nodes.items():
                fv.write(f'{n} {{ global: ' + ''.join(f'{s}; ' for s in ss) + '};\n')
        cmd = ['gcc', '-shared', '-fPIC', '-w', '-o', os.path.join(out, soname), src, f'-Wl,-soname,{soname}']
        if nodes:
            cmd.append(f'-Wl,--version-script={vmap}')
        subprocess.run(cmd, check=True)
        os.remove(src)
        os.remove(vmap)
    print(f'stubbed {len(missing)} libraries ({", ".join(missing)}), {len(loose)} unversioned symbols')


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
