#!/usr/bin/env python3
"""Makes the .pt fixtures under tests/data/pt/ with real torch.save (torch 2.15.0 from
PyPI, CPU use, see torch_cpu.sh), plus hostile files crafted with pickle + zipfile.

    tests/reference/torch_cpu.sh install
    tests/reference/torch_cpu.sh python tests/reference/make_pt_fixtures.py [OUT_DIR]

Writes:
  rotation/k_rotation_qqt_r_h_pbr.pt, v_rotation_sst_r_h_pbr.pt, manifest.json
      a RotationZoo directory (spec section 7): 2 layers, d = 8, int layer keys
  rotation_str_keys/...   the same rotations with string layer keys, an unknown
      top-level key, an unknown per-layer key, and no manifest
  values.pt         a dict holding every value type the reader supports
  state_dict.pt     an OrderedDict (with _metadata, as nn.Module.state_dict() has) of
      float16/bfloat16/int64/float64/int32/bool/uint16 tensors, a transposed view, an
      offset view sharing a storage, a 0-dim tensor, an empty tensor, a Parameter
  expected.json     every tensor above as {dtype, shape, values (row-major floats)}
  hostile/*.pt      files the reader must refuse (each with the reason in
      expected.json["hostile"])
"""
import collections
import io
import json
import math
import os
import pickle
import sys
import zipfile

import torch

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', 'data', 'pt')
os.makedirs(out, exist_ok=True)
torch.manual_seed(1234)
expected = {'torch_version': torch.__version__, 'tensors': {}, 'hostile': {}}


def describe(t):
    return {'dtype': str(t.dtype).replace('torch.', ''), 'shape': list(t.shape),
            'values': [float(x) for x in t.detach().to(torch.float64).flatten().tolist()]}


# ---- RotationZoo ------------------------------------------------------------------
d, n_layers = 8, 2


def rotation_file(objective, seed, str_keys=False, extras=False):
    g = torch.Generator().manual_seed(seed)
    layers = {}
    for i in range(n_layers):
        q, _ = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64, generator=g))
        ev = torch.sort(torch.rand(d, dtype=torch.float64, generator=g) * 10).values
        entry = {'layer_id': i, 'rotation': q.to(torch.float32), 'eigenvalues': ev.to(torch.float32)}
        if extras:
            entry['note'] = 'ignored'
        layers[str(i) if str_keys else i] = entry
    obj = {'format_version': 1, 'objective': objective, 'source_grouping': 'layer', 'layers': layers}
    if extras:
        obj['calibration'] = {'tokens': 20000, 'prompts': [1, 2]}
    return obj


for sub, str_keys in (('rotation', False), ('rotation_str_keys', True)):
    os.makedirs(os.path.join(out, sub), exist_ok=True)
    k = rotation_file('qqt_r_h_pbr', 1, str_keys, extras=str_keys)
    v = rotation_file('sst_r_h_pbr', 2, str_keys, extras=str_keys)
    torch.save(k, os.path.join(out, sub, 'k_rotation_qqt_r_h_pbr.pt'))
    torch.save(v, os.path.join(out, sub, 'v_rotation_sst_r_h_pbr.pt'))
    if sub == 'rotation':
        for name, obj in (('k', k), ('v', v)):
            for key, layer in obj['layers'].items():
                expected['tensors'][f'{name}.{key}.rotation'] = describe(layer['rotation'])
                expected['tensors'][f'{name}.{key}.eigenvalues'] = describe(layer['eigenvalues'])
        manifest = {'format': 'oscar-rotations', 'version': 1, 'head_dim': d, 'group_size': 8,
                    'sink_tokens': 4, 'recent_tokens': 16, 'k_objective': 'qqt_r_h_pbr',
                    'v_objective': 'sst_r_h_pbr', 'source_grouping': 'layer',
                    'k_file': 'k_rotation_qqt_r_h_pbr.pt', 'v_file': 'v_rotation_sst_r_h_pbr.pt',
                    'n_layers': n_layers, 'layers': [{'layer': i, 'k_clip': 0.9 + 0.01 * i, 'v_clip': 0.8 + 0.01 * i}
                               for i in range(n_layers)]}
        with open(os.path.join(out, sub, 'manifest.json'), 'w') as f:
            json.dump(manifest, f, indent=1)

# ---- every value type -------------------------------------------------------------
values = {
    'none': None, 'true': True, 'false': False,
    'ints': [0, 1, 255, 256, 65535, 65536, -1, -256, 2**31 - 1, -2**31, 2**31, 2**40, -2**40, 2**63 - 1, -2**63],
    'floats': [1.5, -0.0, 1e300, -2.5e-310, math.inf, -math.inf],
    'nan': math.nan,
    'strings': ['', 'plain', 'h\u00e9llo \u2603 \U0001F600', 'x' * 300],
    'tuples': [(), (1,), (1, 'a'), (1, 'a', None), (1, 2, 3, 4, 5)],
    'nested': {'list': [[], [1, [2, [3]]]], 'dict': {'a': {'b': {'c': 1}}}},
    'int_keys': {3: 'three', -1: 'minus one', 1000000: 'million'},
    'ordered': collections.OrderedDict([('z', 1), ('a', 2), ('m', 3)]),
    'scalar_tensor': torch.tensor(3.25),
    'tensor_in_list': [torch.arange(3, dtype=torch.int64)],
}
torch.save(values, os.path.join(out, 'values.pt'))
expected['tensors']['values.scalar_tensor'] = describe(values['scalar_tensor'])
expected['tensors']['values.tensor_in_list'] = describe(values['tensor_in_list'][0])

# ---- a state dict -----------------------------------------------------------------
base = torch.arange(24, dtype=torch.float32).reshape(4, 6) / 8
sd = collections.OrderedDict()
sd['fp16'] = (torch.randn(3, 5) * 4).to(torch.float16)
sd['bf16'] = (torch.randn(2, 3, 4) * 100).to(torch.bfloat16)
sd['i64'] = torch.tensor([[-(2**40), 0, 7], [1, 2**62, -3]], dtype=torch.int64)
sd['f64'] = torch.tensor([1.0 / 3, -2.0, 1e-300], dtype=torch.float64)
sd['i32'] = torch.tensor([-5, 0, 2**31 - 1], dtype=torch.int32)
sd['bool'] = torch.tensor([True, False, True])
sd['u16'] = torch.tensor([0, 1, 65535], dtype=torch.uint16)
sd['base'] = base
sd['transposed'] = base.t()                  # strides (1, 6): not contiguous
sd['offset_view'] = base[1:, 2:5]            # storage offset 8, strides (6, 1)
sd['strided_1d'] = base.flatten()[3::5]      # stride 5
sd['scalar'] = torch.tensor(-7.5)
sd['empty'] = torch.zeros(0, 3)
sd['param'] = torch.nn.Parameter(torch.ones(2, 2))
sd._metadata = collections.OrderedDict([('', {'version': 1})])
torch.save(sd, os.path.join(out, 'state_dict.pt'))
for k_, t in sd.items():
    expected['tensors'][f'state_dict.{k_}'] = describe(t)
expected['state_dict_keys'] = list(sd.keys())

# ---- hostile files ----------------------------------------------------------------
os.makedirs(os.path.join(out, 'hostile'), exist_ok=True)


def zip_pt(name, pkl, records=None, archive='archive'):
    path = os.path.join(out, 'hostile', name)
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as z:
        z.writestr(f'{archive}/data.pkl', pkl)
        for key, data in (records or {}).items():
            z.writestr(f'{archive}/data/{key}', data)
        z.writestr(f'{archive}/byteorder', 'little')
        z.writestr(f'{archive}/version', '3\n')
    return path


def hostile(name, reason, pkl, records=None):
    zip_pt(name, pkl, records)
    expected['hostile'][name] = reason


def u(s):  # BINUNICODE
    b = s.encode()
    return b'X' + len(b).to_bytes(4, 'little') + b


def rebuild(storage_cls, key, numel, offset, size, stride):
    tup = lambda xs: b'(' + b''.join(b'J' + x.to_bytes(4, 'little', signed=True) for x in xs) + b't'
    return (b'ctorch._utils\n_rebuild_tensor_v2\n(' + b'(' + u('storage') + b'ctorch\n' + storage_cls + b'\n' +
            u(key) + u('cpu') + b'\x8a\x08' + numel.to_bytes(8, 'little', signed=True) + b'tQ' +
            b'J' + offset.to_bytes(4, 'little', signed=True) + tup(size) + tup(stride) +
            b'\x89ccollections\nOrderedDict\n)RtR')


P = b'\x80\x02'
hostile('global_os_system.pt', "os.system", P + b'cos\nsystem\n(' + u('echo pwned') + b'tR.')
hostile('reduce_builtins_eval.pt', "builtins.eval", P + b'cbuiltins\neval\n(' + u('1+1') + b'tR.')


class Evil:
    def __reduce__(self):
        return (os.system, ('echo pwned',))


# What pickle itself writes for a malicious object (protocol 4: STACK_GLOBAL, FRAME).
hostile('real_pickle_posix_system.pt', "posix.system", pickle.dumps({'w': Evil()}, protocol=4))
hostile('absurd_numel.pt', "claims", P + rebuild(b'FloatStorage', '0', 2**60, 0, [4], [1]) + b'.',
        {'0': b'\0' * 16})
hostile('view_out_of_storage.pt', "reaches element", P + rebuild(b'FloatStorage', '0', 4, 2, [2, 2], [2, 1]) + b'.',
        {'0': b'\0' * 16})
hostile('huge_string.pt', "truncated", P + b'X\xff\xff\xff\x7fabc.')
hostile('missing_storage.pt', "missing", P + rebuild(b'FloatStorage', '7', 4, 0, [4], [1]) + b'.', {'0': b'\0' * 16})
hostile('unknown_opcode.pt', "unsupported opcode", P + b'I42\n.')  # INT (text protocol)
hostile('no_stop.pt', "truncated", P + b'}q\x00(' + u('a') + b'K\x01')
# a real torch file cut in half
with open(os.path.join(out, 'values.pt'), 'rb') as f:
    whole = f.read()
with open(os.path.join(out, 'hostile', 'truncated_zip.pt'), 'wb') as f:
    f.write(whole[: len(whole) // 2])
expected['hostile']['truncated_zip.pt'] = "zip"
with open(os.path.join(out, 'hostile', 'not_a_zip.pt'), 'wb') as f:
    f.write(pickle.dumps({'a': 1}, protocol=2))
expected['hostile']['not_a_zip.pt'] = "zip"

with open(os.path.join(out, 'expected.json'), 'w') as f:
    json.dump(expected, f, indent=1, allow_nan=False)
    f.write('\n')

total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(out) for f in fs)
print(f'wrote {out} ({total} bytes) with torch {torch.__version__}')
