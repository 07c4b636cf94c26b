#!/usr/bin/env bash
# Installs the two English prose texts oscar uses, idempotently, into $OSCAR_CACHE/data:
#   calib.txt  calibration text  = Jane Austen, "Persuasion"          (~466 KB)
#   eval.txt   evaluation text   = Jane Austen, "Pride and Prejudice" (~680 KB)
# Both come from the Debian package r-cran-janeaustenr (pinned below; the novels are public
# domain, the package is MIT). Only the .deb is fetched and unpacked (apt-get download +
# dpkg-deb -x); R is not installed: the novels are read straight out of the package's R
# lazy-load database (data/Rdata.rdx + Rdata.rdb) by a small stdlib-only Python reader below.
# Cleaning: hard-wrapped lines are joined into one line per paragraph, runs of spaces become
# one, the _italic_ underscores are dropped, and paragraphs are separated by one blank line.
# The results are checked against the sha256 values below. See docs/texts.md.
#   bash scripts/fetch-texts.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"

deb_name=r-cran-janeaustenr
deb_version=1.0.0-1
data_dir="$OSCAR_CACHE/data"
calib="$data_dir/calib.txt"
eval_txt="$data_dir/eval.txt"
calib_sha=ea05f5bd05c12e0b8a04e80ff9f65cb37920658ac47d07a58f615733f93664d2
eval_sha=e739071c8708d3afd59aca3a98a43531d5939e84a9bccaeb28a93774dcfc065e

say() { echo "[fetch-texts] $*"; }
die() { echo "[fetch-texts] ERROR: $*" >&2; exit 1; }
sha_ok() { [[ -f "$1" ]] && echo "$2  $1" | sha256sum -c --quiet - >/dev/null 2>&1; }
report() {
  say "calib.txt: $(stat -c %s "$calib") bytes, sha256 $calib_sha  ($calib)"
  say "eval.txt:  $(stat -c %s "$eval_txt") bytes, sha256 $eval_sha  ($eval_txt)"
}

if sha_ok "$calib" "$calib_sha" && sha_ok "$eval_txt" "$eval_sha"; then
  say "already present and verified"
  report
  exit 0
fi

command -v dpkg-deb >/dev/null || die "dpkg-deb not found (Debian machine expected)"
command -v apt-get >/dev/null || die "apt-get not found (Debian machine expected)"
py="$OSCAR_VENV/bin/python"
[[ -x "$py" ]] || py="$(command -v python3 || true)"
[[ -n "$py" ]] || die "no python3 found"
mkdir -p "$data_dir" || die "cannot create $data_dir"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/fetch-texts.XXXXXX")"
trap 'rm -rf "$tmp"; rm -f "$calib.part" "$eval_txt.part"' EXIT
trap 'exit 130' INT TERM
chmod 755 "$tmp"  # lets apt's _apt user write the .deb there (else apt warns and goes unsandboxed)

# apt-get download needs the package lists; refresh them once if the pinned version is unknown.
download() { (cd "$tmp" && apt-get download -q "$1" >/dev/null 2>&1); }
if ! download "$deb_name=$deb_version"; then
  say "refreshing apt package lists"
  sudo_cmd=""; [[ $(id -u) == 0 ]] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq || die "apt-get update failed"
  if ! download "$deb_name=$deb_version"; then
    # A Debian point release could replace the version; the sha256 checks below still decide.
    say "WARNING: $deb_name=$deb_version unavailable, trying the current version"
    download "$deb_name" || die "apt-get download $deb_name failed"
  fi
fi
debs=("$tmp"/"$deb_name"_*.deb)
[[ -f "${debs[0]}" ]] || die "no .deb downloaded"
say "unpacking $(basename "${debs[0]}")"
dpkg-deb -x "${debs[0]}" "$tmp/root" || die "dpkg-deb -x failed"
rdata="$tmp/root/usr/lib/R/site-library/janeaustenr/data/Rdata"
[[ -f "$rdata.rdx" && -f "$rdata.rdb" ]] || die "$deb_name has no data/Rdata.rdx/.rdb"

"$py" - "$rdata" persuasion "$calib.part" prideprejudice "$eval_txt.part" <<'PY' || die "text extraction failed"
# Reads named character vectors out of an R lazy-load database and writes them as clean text.
# R's XDR serialization: header "X\n", version, writer version, min version (+ native
# encoding for version 3); then items, each starting with an int of flags: type = low 8 bits,
# bit 9 = has attributes, bit 10 = has tag. Only the types these files use are handled.
# The .rdx index is gzip'd serialized list(variables = list(name = c(offset, length)), ...);
# each .rdb record is a 4-byte big-endian uncompressed length and a compressed body.
import bz2, gzip, lzma, re, struct, sys, zlib

NILVALUE, REF, SYM, LIST, CHAR = 254, 255, 1, 2, 9

class Reader:
    def __init__(self, data):
        self.d, self.p, self.refs = data, 0, []

    def int(self):
        (v,) = struct.unpack_from(">i", self.d, self.p)
        self.p += 4
        return v

    def bytes(self, n):
        v = self.d[self.p:self.p + n]
        self.p += n
        return v

    def length(self):
        n = self.int()
        if n == -1:  # long vector: two more ints
            n = (self.int() << 32) | self.int()
        return n

    def top(self):
        if self.bytes(2) != b"X\n":
            raise ValueError("not an XDR R serialization")
        version = self.int()
        self.int(); self.int()
        if version == 3:
            self.bytes(self.int())
        return self.item()

    def item(self):
        flags = self.int()
        kind = flags & 0xFF
        has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if kind == NILVALUE:
            return None
        if kind == REF:
            k = flags >> 8
            return self.refs[(k if k else self.int()) - 1]
        if kind == SYM:
            v = ("sym", self.item())
            self.refs.append(v)
            return v
        if kind == CHAR:
            n = self.int()
            return None if n == -1 else self.bytes(n).decode("utf-8")
        if kind == LIST:  # pairlist -> list of (tag, value)
            out = []
            while True:
                if has_attr:
                    self.item()
                tag = self.item() if has_tag else None
                out.append((tag[1] if tag else None, self.item()))
                flags = self.int()
                if flags & 0xFF == NILVALUE:
                    return out
                if flags & 0xFF != LIST:
                    raise ValueError("improper pairlist")
                has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if kind in (10, 13):  # logical, integer
            n = self.length()
            v = list(struct.unpack_from(">%di" % n, self.d, self.p)); self.p += 4 * n
        elif kind == 14:  # double
            n = self.length()
            v = list(struct.unpack_from(">%dd" % n, self.d, self.p)); self.p += 8 * n
        elif kind in (16, 19, 20):  # character, list, expression
            v = [self.item() for _ in range(self.length())]
        else:
            raise ValueError("unsupported R type %d" % kind)
        if has_attr:
            v = ("attr", v, dict(self.item()))
        return v

def named(x):
    _, values, attrs = x
    return dict(zip(attrs["names"], values))

def record(rdb, offset, size):
    blob = rdb[offset:offset + size]
    (ulen,) = struct.unpack(">I", blob[:4])
    try:
        data = zlib.decompress(blob[4:])
    except zlib.error:  # typed record: one byte Z/2/X/0, then the body
        codec = {b"Z": zlib.decompress, b"2": bz2.decompress, b"X": lzma.decompress, b"0": bytes}
        data = codec[blob[4:5]](blob[5:])
    if len(data) != ulen:
        raise ValueError("bad record length")
    return Reader(data).top()

def clean(lines):
    paras, cur = [], []
    for line in lines + [""]:
        line = (line or "").strip()
        if line:
            cur.append(line)
        elif cur:
            paras.append(" ".join(cur)); cur = []
    out = []
    for p in paras:
        p = re.sub(r"_([^_]+)_", r"\1", p)  # Gutenberg's _italics_
        p = re.sub(r"\s+", " ", p.replace("_", "")).strip()
        if p:
            out.append(p)
    return "\n\n".join(out) + "\n"

base, pairs = sys.argv[1], sys.argv[2:]
index = named(Reader(gzip.decompress(open(base + ".rdx", "rb").read())).top())
variables = named(index["variables"])
rdb = open(base + ".rdb", "rb").read()
for name, dest in zip(pairs[0::2], pairs[1::2]):
    offset, size = variables[name]
    lines = record(rdb, offset, size)
    if not isinstance(lines, list) or not all(l is None or isinstance(l, str) for l in lines):
        raise ValueError(name + " is not a character vector")
    with open(dest, "w", encoding="utf-8", newline="\n") as f:
        f.write(clean(lines))
PY

for pair in "$calib:$calib_sha" "$eval_txt:$eval_sha"; do
  f="${pair%%:*}"; want="${pair##*:}"
  got="$(sha256sum "$f.part" | cut -d' ' -f1)"
  [[ "$got" == "$want" ]] || die "sha256 mismatch for $(basename "$f"): got $got, expected $want"
  mv -f "$f.part" "$f"
done
report
