#!/usr/bin/env python3
"""Checks with real PyTorch that files written by oscar's .pt writer load through
torch.load(path, weights_only=True) (the safe loader) and hold what oscar meant.

    torch_cpu.sh python check_pt_roundtrip.py FILE.pt FILE.json [FILE2.pt FILE2.json ...]
        FILE.json describes the value oscar wrote (written by the C++ test):
        {"t": "none"|"bool"|"int"|"float"|"str"|"list"|"tuple"|"dict"|"tensor", ...}
        ints as decimal strings, floats as C hex-float strings, tensors as dtype,
        shape, requires_grad and the row-major bytes in hex.
    torch_cpu.sh python check_pt_roundtrip.py --rotation-dir DIR
        DIR holds k_rotation_*.pt and v_rotation_*.pt in the RotationZoo layout; checks
        the layout the way the reference loader reads it (layers[i]["rotation"]).

Exit status 0 when everything matches; otherwise prints the first mismatch.
"""
import collections
import glob
import json
import os
import sys

import torch


def fail(path, msg):
    print(f'mismatch at {path}: {msg}')
    sys.exit(1)


def tensor_bytes(t):
    return bytes(t.detach().contiguous().reshape(-1).view(torch.uint8).tolist())


def check(v, want, path='$'):
    t = want['t']
    if t == 'none':
        if v is not None:
            fail(path, f'{v!r} is not None')
    elif t == 'bool':
        if not isinstance(v, bool) or v != want['v']:
            fail(path, f'{v!r} != {want["v"]}')
    elif t == 'int':
        if type(v) is not int or v != int(want['v']):
            fail(path, f'{v!r} != {want["v"]}')
    elif t == 'float':
        w = float.fromhex(want['v'])
        if type(v) is not float or not (v == w or (v != v and w != w)):
            fail(path, f'{v!r} != {w!r}')
    elif t == 'str':
        if v != want['v']:
            fail(path, f'{v!r} != {want["v"]!r}')
    elif t in ('list', 'tuple'):
        if type(v) is not (list if t == 'list' else tuple) or len(v) != len(want['v']):
            fail(path, f'{type(v).__name__} of {len(v) if hasattr(v, "__len__") else "?"} != {t} of {len(want["v"])}')
        for i, (x, w) in enumerate(zip(v, want['v'])):
            check(x, w, f'{path}[{i}]')
    elif t == 'dict':
        want_type = collections.OrderedDict if want['ordered'] else dict
        if type(v) is not want_type:
            fail(path, f'{type(v).__name__} is not {want_type.__name__}')
        keys = [int(k['v']) if k['t'] == 'int' else k['v'] for k, _ in want['v']]
        if list(v.keys()) != keys:
            fail(path, f'keys {list(v.keys())} != {keys}')
        for k, (_, w) in zip(keys, want['v']):
            check(v[k], w, f'{path}[{k!r}]')
    elif t == 'tensor':
        if not isinstance(v, torch.Tensor):
            fail(path, f'{type(v).__name__} is not a tensor')
        if str(v.dtype) != 'torch.' + want['dtype'] or list(v.shape) != want['shape']:
            fail(path, f'{v.dtype} {list(v.shape)} != {want["dtype"]} {want["shape"]}')
        if v.requires_grad != want['requires_grad']:
            fail(path, f'requires_grad {v.requires_grad}')
        if tensor_bytes(v).hex() != want['hex']:
            fail(path, 'tensor bytes differ')
    else:
        fail(path, f'unknown type {t}')


def check_rotation_dir(d):
    for side in ('k', 'v'):
        files = glob.glob(os.path.join(d, f'{side}_rotation_*.pt'))
        if len(files) != 1:
            fail(d, f'{len(files)} {side}_rotation_*.pt files')
        obj = torch.load(files[0], weights_only=True)
        if obj.get('format_version') != 1 or obj.get('source_grouping') != 'layer':
            fail(files[0], 'format_version / source_grouping')
        if 'objective' not in obj or not files[0].endswith(f'{side}_rotation_{obj["objective"]}.pt'):
            fail(files[0], f'objective {obj.get("objective")!r} does not match the file name')
        layers = obj['layers']
        for i in range(len(layers)):
            r = layers[i]['rotation']
            if layers[i]['layer_id'] != i or r.dtype != torch.float32 or r.dim() != 2 or r.shape[0] != r.shape[1]:
                fail(f'{files[0]}:layers[{i}]', f'layer_id / rotation {r.dtype} {list(r.shape)}')
            err = (r.double().T @ r.double() - torch.eye(r.shape[0], dtype=torch.float64)).abs().max().item()
            if err > 1e-5:
                fail(f'{files[0]}:layers[{i}]', f'‖RᵀR − I‖max = {err}')
            e = layers[i]['eigenvalues']
            if e.dtype != torch.float32 or list(e.shape) != [r.shape[0]]:
                fail(f'{files[0]}:layers[{i}]', 'eigenvalues')
    print(f'{d}: RotationZoo layout loads with torch {torch.__version__} (weights_only=True)')


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == '--rotation-dir':
        check_rotation_dir(sys.argv[2])
    elif len(sys.argv) >= 3 and len(sys.argv) % 2 == 1:
        for pt, js in zip(sys.argv[1::2], sys.argv[2::2]):
            value = torch.load(pt, weights_only=True)
            with open(js) as f:
                check(value, json.load(f))
            print(f'{pt}: loads with torch {torch.__version__} (weights_only=True) and matches')
    else:
        print(__doc__)
        sys.exit(2)
