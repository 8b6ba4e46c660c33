#!/usr/bin/env python3
"""The structure bars ARCHITECTURE.md keeps, measured over the Rust sources.

  - no function over 60 lines (body lines, braces included, tests included),
  - no file over 500 lines (counted up to its `#[cfg(test)]` module; test files aside:
    `tests/`, `tests.rs`),
  - no struct with more than 12 named fields,
  - no type whose inherent `impl` blocks span more than 2 files.

Usage: python3 scripts/structure-bars.py [--check] [FILES...]
Without FILES it reads every tracked Rust file. It prints each item over its bar and a summary line per bar;
with --check it exits 1 when any bar is exceeded (CI runs it so).
"""
import os
import re
import subprocess
import sys
from collections import defaultdict

FN_MAX, FILE_MAX, FIELDS_MAX, IMPL_FILES_MAX = 60, 500, 12, 2

FN = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?'
                r'(?:extern\s+"[^"]*"\s+)?fn\s+(\w+)')
STRUCT = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?struct\s+(\w+)[^;(]*\{')
TYPE = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:struct|enum|union|trait|type)\s+(\w+)')
FIELD = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:r#)?\w+\s*:[^:]')
IMPL = re.compile(r'^(?:unsafe\s+)?impl\b(?:\s*<[^{]*?>)?\s+([\w:]+)(?:<[^{]*>)?\s*(?:where\b[^{]*)?\{')


def strip(line, state):
    """`line` without comments and string contents; `state` carries open comments/strings."""
    out, i, n = [], 0, len(line)
    while i < n:
        if state['blk']:
            j = line.find('*/', i)
            if j < 0:
                return ''.join(out)
            i, state['blk'] = j + 2, False
            continue
        if state['str']:
            end = state['str']
            if end == '"':
                j = i
                while j < n and line[j] != '"':
                    j += 2 if line[j] == '\\' else 1
                if j >= n:
                    return ''.join(out)
                i = j + 1
            else:
                j = line.find(end, i)
                if j < 0:
                    return ''.join(out)
                i = j + len(end)
            state['str'] = None
            out.append('""')
            continue
        c = line[i]
        if line.startswith('//', i):
            break
        if line.startswith('/*', i):
            state['blk'], i = True, i + 2
            continue
        m = re.match(r'b?r(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == '_')):
            state['str'], i = '"' + m.group(1), i + len(m.group(0))
            continue
        if c == '"':
            state['str'], i = '"', i + 1
            continue
        if c == "'":
            m = re.match(r"'(\\.|[^\\'])'", line[i:]) or re.match(r"'\\u\{[0-9a-fA-F]+\}'", line[i:])
            if m:
                i += len(m.group(0))
                continue
        out.append(c)
        i += 1
    return ''.join(out)


def block_end(clean, start):
    """Index of the line closing the first `{` at or after `start`; None for `fn f();`."""
    depth, started = 0, False
    for j in range(start, len(clean)):
        for ch in clean[j]:
            if ch == '{':
                depth, started = depth + 1, True
            elif ch == '}':
                depth -= 1
                if started and depth == 0:
                    return j
            elif ch == ';' and not started:
                return None
    return None


def is_test_file(path):
    """Whether `path` holds only tests (the file bar leaves these aside)."""
    return path.endswith('tests.rs') or path.startswith('tests/') or '/tests/' in path


def owner(name, path, defined):
    """The file defining the type `name` whose `impl` is in `path`: of the files defining a type
    of that name, the one whose folder holds `path` most closely (types of one name in other
    modules are other types); `name` alone when none does."""
    best = None
    for d in defined.get(name, ()):
        folder = os.path.dirname(d)
        if (path + '/').startswith(folder + '/') and (best is None or len(folder) > len(os.path.dirname(best))):
            best = d
    return best or name


def measure(paths):
    long_fns, long_files, wide, impls = [], [], [], {}
    defined = defaultdict(set)
    for path in paths:
        with open(path, encoding='utf-8', errors='replace') as f:
            lines = f.read().split('\n')
        state = {'blk': False, 'str': None}
        clean = [strip(line, state) for line in lines]
        test_at = next((i for i, l in enumerate(lines) if l.startswith('#[cfg(test)]')), len(lines))
        if test_at > FILE_MAX and not is_test_file(path):
            long_files.append((test_at, path))
        for i, line in enumerate(clean):
            m = FN.match(line)
            if m:
                end = block_end(clean, i)
                if end is not None and end - i + 1 > FN_MAX:
                    long_fns.append((end - i + 1, f'{path}:{i + 1}', m.group(1)))
                continue
            t = TYPE.match(line)
            if t:
                defined[t.group(1)].add(path)
            m = STRUCT.match(line)
            if m:
                end = block_end(clean, i)
                depth, n = 0, 0
                for body in clean[i:end + 1]:
                    if depth == 1 and FIELD.match(body):
                        n += 1
                    depth += body.count('{') - body.count('}')
                if n > FIELDS_MAX:
                    wide.append((n, f'{path}:{i + 1}', m.group(1)))
                continue
            m = IMPL.match(line)
            if m and ' for ' not in line.split('{')[0]:
                impls[(m.group(1).split('::')[-1], path)] = True
    by_type = defaultdict(set)
    for name, path in impls:
        by_type[(name, owner(name, path, defined))].add(path)
    spread = sorted(((len(fs), name, sorted(fs)) for (name, _), fs in by_type.items()
                     if len(fs) > IMPL_FILES_MAX), reverse=True)
    return sorted(long_fns, reverse=True), sorted(long_files, reverse=True), sorted(wide, reverse=True), spread


def main():
    args = [a for a in sys.argv[1:] if a != '--check']
    check = len(args) != len(sys.argv) - 1
    if not args:
        out = subprocess.run(['git', 'ls-files', '*.rs'],
                             capture_output=True, text=True, check=True).stdout.split()
        args = [p for p in out if os.path.exists(p)]
    fns, files, wide, spread = measure(args)
    for n, where, name in fns:
        print(f'function {name} at {where}: {n} lines (bar {FN_MAX})')
    for n, path in files:
        print(f'file {path}: {n} lines before its tests (bar {FILE_MAX})')
    for n, where, name in wide:
        print(f'struct {name} at {where}: {n} fields (bar {FIELDS_MAX})')
    for n, name, fs in spread:
        print(f'impl {name}: {n} files (bar {IMPL_FILES_MAX}): {" ".join(fs)}')
    print(f'structure bars over {len(args)} files: {len(fns)} functions > {FN_MAX} lines, '
          f'{len(files)} files > {FILE_MAX} lines, {len(wide)} structs > {FIELDS_MAX} fields, '
          f'{len(spread)} types with impls in > {IMPL_FILES_MAX} files')
    if check and (fns or files or wide or spread):
        sys.exit(1)


if __name__ == '__main__':
    main()
