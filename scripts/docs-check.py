"""Checks every fenced code block of README.md, docs/*.md and python/README.md (or of the
Markdown files given); run by scripts/docs-check.sh (which builds what it needs first).

The block's info string decides (docs/README.md, "How the code blocks are checked"):
  rust, rust no_run       cargo test's doctests (src/doc_examples.rs includes the file); here:
                          only that the file is included there
  sh                      run with bash -e from a scratch copy of the repository root
  sh static               bash -n, and every pslite command's subcommand and flags against --help
  sh ci                   each command is one .ci/run runs itself
  python                  run with the package's Python
  python NAME.py          written to NAME.py in the scratch directory, for the sh blocks after it
  toml                    parsed; a dependency line must name this package
  text                    output; its `$ ` lines are checked as `sh static` (flags only)
Anything else fails. Every block's pslite commands are checked against --help, run or not.
"""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib

ROOT = os.getcwd()
RELEASE = os.path.join(ROOT, "target", "release")
PYTHON = os.environ.get("PSLITE_DOCS_PYTHON", "")
REQUIRE = os.environ.get("PSLITE_REQUIRE_LAUNCHERS") == "1"
BLOCK_TIMEOUT = int(os.environ.get("PSLITE_DOCS_TIMEOUT", "120"))
FILES = sys.argv[1:] or ["README.md"] + sorted(
    os.path.join("docs", f) for f in os.listdir("docs") if f.endswith(".md")
) + ["python/README.md"]
# Entries of the repository root a scratch directory links to (what blocks name by relative
# path). Not Cargo.toml: cargo, run there, must find the repository's own manifest above it.
LINKED = ["data", "scripts", "python", "examples", "tools", "plots", "target"]

errors = []
help_cache = {}


def fail(where, text):
    errors.append(f"{where}: {text}")
    print(f"FAIL {where}: {text}", flush=True)


def blocks(path):
    """(line, info, text) of each fenced block of a Markdown file."""
    out, info, start, body = [], None, 0, []
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.startswith("```"):
            if info is None:
                info, start, body = line[3:].strip(), n, []
            else:
                out.append((start, info, "".join(body)))
                info = None
        elif info is not None:
            body.append(line)
    if info is not None:
        fail(f"{path}:{start}", "a code block that is never closed")
    return out


def help_text(*argv):
    if argv not in help_cache:
        exe = os.path.join(RELEASE, argv[0])
        r = subprocess.run([exe, *argv[1:], "--help"], capture_output=True, text=True)
        help_cache[argv] = r.stdout + r.stderr if r.returncode == 0 else None
    return help_cache[argv]


def subcommands(binary):
    text = help_text(binary) or ""
    part = text.split("Commands:", 1)[1] if "Commands:" in text else ""
    part = re.split(r"\n\S", part, 1)[0]
    return set(re.findall(r"^\s{2}([a-z][a-z0-9-]*)", part, re.M))


def check_flags(where, argv, words):
    """Each --flag of `words` (up to a bare `--`) is one that `argv --help` lists."""
    text = help_text(*argv)
    if text is None:
        fail(where, f"`{' '.join(argv)} --help` fails")
        return
    for w in words:
        if w == "--":
            break
        m = re.match(r"(--[a-z0-9][a-z0-9-]*)", w)
        if m and not re.search(re.escape(m.group(1)) + r"(?![\w-])", text):
            fail(where, f"`{' '.join(argv)}` has no flag {m.group(1)}")


def check_worker(where, words):
    """`APP [flags]` as pslite-worker (or a launcher's worker arguments) takes them."""
    if not words or words[0].startswith("-"):
        return
    if words[0] not in subcommands("pslite-worker"):
        fail(where, f"pslite-worker has no app {words[0]!r}")
        return
    check_flags(where, ("pslite-worker", words[0]), words[1:])


def logical_lines(text, dollar=False):
    """Lines with their backslash continuations joined; with dollar, only `$ ` lines."""
    out, cur, keep = [], "", not dollar
    for line in text.splitlines():
        if dollar and not cur:
            keep = line.startswith("$ ")
            line = line[2:] if keep else line
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        if keep:
            out.append(cur + line)
        cur = ""
    return out


def check_commands(where, text, dollar=False):
    """Every pslite-launch / pslite-worker / pslite-server command against its --help."""
    for line in logical_lines(text, dollar):
        if line.lstrip().startswith("#"):
            continue
        try:
            lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
            lex.whitespace_split = True
            lex.commenters = "#"
            words = list(lex)
        except ValueError as e:
            fail(where, f"cannot split {line!r}: {e}")
            continue
        for i, w in enumerate(words):
            base = os.path.basename(w)
            rest = words[i + 1 :]
            for j, r in enumerate(rest):  # up to the end of this command
                if r in (";", "&", "&&", "|", "||", ")"):
                    rest = rest[:j]
                    break
            if base == "cargo" and "--bin" in rest:
                b = rest[rest.index("--bin") + 1] if rest.index("--bin") + 1 < len(rest) else ""
                if b.startswith("pslite-") and "--" in rest:
                    base, rest = b, rest[rest.index("--") + 1 :]
                else:
                    continue
            elif i > 0 and words[i - 1] == "--bin":
                continue
            if base == "pslite-launch":
                if rest and not rest[0].startswith("-"):
                    if rest[0] not in subcommands("pslite-launch"):
                        fail(where, f"pslite-launch has no subcommand {rest[0]!r}")
                        continue
                    check_flags(where, ("pslite-launch", rest[0]), rest[1:])
                    if "--" in rest:
                        check_worker(where, rest[rest.index("--") + 1 :])
            elif base == "pslite-worker":
                check_worker(where, rest)
            elif base in ("pslite-server", "pslite-scheduler"):
                check_flags(where, (base,), rest)


def scratch(path):
    """A directory that looks like the repository root to a block, one per Markdown file."""
    d = os.path.join(ROOT, "target", "docs-check", path.replace("/", "_").removesuffix(".md"))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name in LINKED:
        os.symlink(os.path.join(ROOT, name), os.path.join(d, name))
    return d


def run(where, argv, cwd, env):
    t0 = time.monotonic()
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        fail(where, f"still running after {BLOCK_TIMEOUT} s (PSLITE_DOCS_TIMEOUT):\n{out[-3000:]}")
        return
    finally:
        try:  # what the block left running in the background (`pslite-scheduler &`)
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    took = time.monotonic() - t0
    if p.returncode != 0:
        fail(where, f"exit status {p.returncode} after {took:.1f} s:\n{out[-3000:]}")
    else:
        print(f"  ok {where} ({took:.1f} s)", flush=True)


def slug(heading):
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    out, fenced = set(), False
    for line in open(path, encoding="utf-8"):
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def check_links():
    """Every relative link of the Markdown files (and of the top-level ones) reaches a file,
    and a heading where it names one."""
    for f in set(FILES) | {"ARCHITECTURE.md", "BENCHMARKS.md", "HISTORY.md"}:
        text = re.sub(r"```.*?```", "", open(f, encoding="utf-8").read(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(f), file)) if file else f
            if not os.path.exists(dest):
                fail(f, f"a link to {target}: no such file")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                fail(f, f"a link to {target}: no such heading")


def main():
    included = open("src/doc_examples.rs", encoding="utf-8").read()
    for f in FILES:
        if f != "python/README.md" and f'include_str!("../{f}")' not in included:
            fail(f, "not included in src/doc_examples.rs, so its rust blocks are not doctests")

    cargo = tomllib.load(open("Cargo.toml", "rb"))["package"]["name"]
    ci = {l.strip() for l in open(".ci/run", encoding="utf-8")}
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    path = [RELEASE]
    if PYTHON:
        path.append(os.path.dirname(PYTHON))
    env["PATH"] = os.pathsep.join(path + [env.get("PATH", "")])
    ran = static = 0

    for f in FILES:
        d = None
        for line, info, text in blocks(f):
            where = f"{f}:{line}"
            words = info.split()
            lang, attrs = (words[0] if words else ""), words[1:]
            if lang == "rust":
                if set(attrs) - {"no_run"}:
                    fail(where, f"rust block marked {' '.join(attrs)}: only `no_run` is allowed")
                continue
            if lang == "text":
                check_commands(where, text, dollar=True)
                continue
            if lang == "toml" and not attrs:
                try:
                    deps = tomllib.loads(text).get("dependencies", {})
                except tomllib.TOMLDecodeError as e:
                    fail(where, f"not TOML: {e}")
                    continue
                if deps and cargo not in deps:
                    fail(where, f"a dependency line that does not name the package {cargo!r}")
                static += 1
                continue
            if lang == "python" and (not attrs or (len(attrs) == 1 and attrs[0].endswith(".py"))):
                d = d or scratch(f)
                name = attrs[0] if attrs else f"block-{line}.py"
                with open(os.path.join(d, name), "w", encoding="utf-8") as out:
                    out.write(text)
                compiled = subprocess.run([sys.executable, "-c",
                                           "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')",
                                           os.path.join(d, name)], capture_output=True, text=True)
                if compiled.returncode != 0:
                    fail(where, f"does not compile:\n{compiled.stderr}")
                    continue
                if attrs:
                    continue  # run by the sh blocks after it
                if PYTHON:
                    run(where, [PYTHON, name], d, env)
                    ran += 1
                elif REQUIRE:
                    fail(where, "no Python with the pslite package (PSLITE_DOCS_PYTHON)")
                else:
                    print(f"  SKIPPED (compiled only: no Python with pslite) {where}", flush=True)
                continue
            if lang in ("sh", "bash") and attrs in ([], ["static"], ["ci"]):
                syntax = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
                if syntax.returncode != 0:
                    fail(where, f"bash -n: {syntax.stderr.strip()}")
                    continue
                check_commands(where, text)
                if attrs == ["static"]:
                    static += 1
                    continue
                if attrs == ["ci"]:
                    for cmd in logical_lines(text):
                        if cmd.strip() and not cmd.lstrip().startswith("#") and cmd.strip() not in ci:
                            fail(where, f"`{cmd.strip()}` is not a line of .ci/run")
                    static += 1
                    continue
                if "python" in text and not PYTHON:
                    if REQUIRE:
                        fail(where, "runs Python, and there is no Python with the pslite package")
                    else:
                        print(f"  SKIPPED (runs Python: no Python with pslite) {where}", flush=True)
                    continue
                d = d or scratch(f)
                run(where, ["bash", "-e", "-o", "pipefail", "-c", text], d, env)
                ran += 1
                continue
            fail(where, f"a ```{info} block: neither run nor checked (docs/README.md has the rule)")

    check_links()

    # The README's Rust example is examples/push_pull.rs (built by cargo build --examples).
    readme = [t for _, i, t in blocks("README.md") if i == "rust"]
    example = open("examples/push_pull.rs", encoding="utf-8").read()
    if readme and readme[0] != example:
        fail("README.md", "its rust block differs from examples/push_pull.rs")

    print(f"docs-check: {ran} blocks run, {static} checked statically, "
          f"{len(errors)} failure(s)", flush=True)
    sys.exit(1 if errors else 0)


main()
