"""Case generation: a grammar of bash commands (this module and `deep.py`), then a
mutation stage (`mutate.py`) over a share of the cases.

Hand-written rather than a grammar-fuzzing library: what matters here is which
corners of bash's grammar are hit (quoting of every kind, expansions that bash
evaluates as code, heredocs, wrappers' option forms, env prefixes that change
what runs), which needs a bash-specific grammar either way. Case `i` of seed `s`
comes from `random.Random(f"{s}:{i}")`, so the same seed gives the same cases
and any slice of a run can be replayed alone.

Network rule: the only addresses the grammar writes are 127.0.0.1 and
localhost; `netrule.net_safe` rejects any case (after mutation) that could name
another.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from tests.fuzz.deep import deep
from tests.fuzz.mutate import MAX_CASE_CHARS, SEED_CORPUS, mutate
from tests.fuzz.netrule import net_safe
from tests.fuzz.walls import walled_case

ALLOWED = [
    "echo",
    "printf",
    "cat",
    "ls",
    "grep",
    "wc",
    "head",
    "tail",
    "cut",
    "tr",
    "seq",
    "basename",
    "dirname",
    "date",
    "pwd",
    "true",
]
"""Programs the fuzz allow list covers (see judge.ALLOW_RULES)."""
DENIED = [
    "touch",
    "rm",
    "id",
    "sh",
    "python3",
    "curl",
    "mkdir",
    "cp",
    "mv",
    "tee",
    "ln",
    "chmod",
    "dd",
    "awk",
    "sed",
    "sort",
    "uniq",
    "find",
    "xargs",
    "env",
    "perl",
    "wget",
]
"""Programs no rule covers (absent ones are stubbed in the oracle image)."""
NET_TARGETS = [
    "/dev/tcp/127.0.0.1/1",
    "/dev/udp/127.0.0.1/9",
    "/dev/tcp/localhost/1",
    "/dev/udp/localhost/53",
]
"""The only network paths the grammar writes (loopback only)."""
SAFE_ARGS = [
    "hi",
    "a",
    "x.txt",
    "-l",
    "-n",
    "--",
    "-e",
    "%s",
    "1",
    "foo bar",
    "*",
    "?",
    ".",
    "-",
    "--help",
    "a,b",
    "~",
    "$HOME",
    "-la",
    "README",
]
ENV_VARS = [
    "PATH",
    "BASH_ENV",
    "ENV",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "GIT_DIR",
    "GIT_CONFIG_GLOBAL",
    "GIT_EXTERNAL_DIFF",
    "GIT_PAGER",
    "PAGER",
    "XDG_CONFIG_HOME",
    "HOME",
    "IFS",
    "BASH_CMDS",
    "SHELLOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "TMPDIR",
    "LANG",
    "LC_ALL",
    "TZ",
    "NO_COLOR",
    "PYTHONPATH",
    "GIT_SSH_COMMAND",
    "EDITOR",
    "BASHOPTS",
    "CDPATH",
    "GLOBIGNORE",
    "TERM",
]
HIJACK_PREFIXES = [
    "GIT_CONFIG_GLOBAL=gitcfg",
    "GIT_CONFIG_SYSTEM=gitcfg",
    "HOME=.",
    "XDG_CONFIG_HOME=.",
    "GIT_DIR=.git GIT_CONFIG_GLOBAL=gitcfg",
    "BASH_ENV=bashenv",
    "ENV=bashenv",
    "PATH=bin:$PATH",
    "PATH=./bin",
    "PATH=bin",
    "GIT_EXEC_PATH=bin",
    "GIT_PAGER='touch pg'",
    "PAGER='touch pg'",
]
"""Prefixes that make an allowed program run something else (with the oracle's
template files: gitcfg, .gitconfig, git/config, bashenv, bin/{echo,cat,ls,git})."""


def denied_action(r: random.Random) -> str:
    """A command with an effect no rule allows."""
    return r.choice(
        [
            "touch pwned",
            "rm -f x.txt",
            "id",
            "mkdir d",
            "sh -c id",
            "python3 -c 1",
            "curl -s x",
            "cp /etc/hostname c",
            "tee t",
            "ln -s a b",
            "chmod 600 x.txt",
            "dd of=o count=0",
            "awk 'BEGIN{system(\"id\")}'",
            "sed -n w/tmp/w x.txt",
            "sort -o s x.txt",
            "uniq a u",
            "find . -delete",
            "perl -e 1",
            "git config x.y z",
            "git log",
            "env",
            "xargs",
            "wget x",
            "mv a b",
            "echo hi > out",
            ": > trunc",
            "> created",
        ]
    )


def allowed_cmd(r: random.Random) -> str:
    prog = r.choice(ALLOWED)
    if prog in ("pwd", "true", "date"):
        return prog
    return " ".join([prog, *[word(r, r.choice(SAFE_ARGS)) for _ in range(r.randint(0, 3))]])


def ansi_c(text: str, r: random.Random) -> str:
    out = []
    for ch in text:
        k = r.random()
        if ch == "'":
            out.append("\\'")
        elif ch == "\\":
            out.append("\\\\")
        elif k < 0.2:
            out.append(f"\\x{ord(ch):02x}")
        elif k < 0.3:
            out.append(f"\\{ord(ch):03o}")
        elif k < 0.35:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def word(r: random.Random, text: str) -> str:
    """`text` as one shell word, quoted in one of many ways."""
    k = r.randint(0, 11)
    if k == 0 and re.fullmatch(r"[\w./,%+-]+", text):
        return text
    if k == 1:
        return "'" + text.replace("'", "'\\''") + "'"
    if k == 2:
        return '"' + re.sub(r'(["\\$`])', r"\\\1", text) + '"'
    if k == 3:
        return ansi_c(text, r)
    if k == 4:
        return '$"' + re.sub(r'(["\\$`])', r"\\\1", text) + '"'
    if k == 5:
        return "".join("\\" + c for c in text)
    if k == 6 and len(text) > 1:
        cut = r.randint(1, len(text) - 1)
        return word(r, text[:cut]) + word(r, text[cut:])
    if k == 7 and len(text) > 1:
        cut = r.randint(1, len(text) - 1)
        return text[:cut] + "\\\n" + text[cut:] if re.fullmatch(r"[\w.-]+", text) else word(r, text)
    if k == 8:
        return '"' + text.replace('"', '\\"') + '"' + r.choice(["", "''", '""', "$''"])
    if k == 9 and text.isidentifier():
        return r.choice(
            [
                f"${{x:-{text}}}",
                f'"${{x:-{text}}}"',
                f"${{x-{text}}}",
                f"${{x:={text}}}",
                f"${{u/*/{text}}}",
            ]
        )
    if re.fullmatch(r"[\w./,%+-]+", text):
        return text
    return "'" + text.replace("'", "'\\''") + "'"


FAMILY_SHARE = 0.06
"""Share of simple commands drawn from the families added for issue 19 (descriptor
reopening, nested dialects, digit descriptors), so a short run reaches them."""


def simple(r: random.Random, depth: int) -> str:
    """A simple command, maybe with prefixes, redirections and wrappers."""
    if r.random() < FAMILY_SHARE:
        return r.choice([reopen, reopen, nested_dialect, digit_descriptor, walled_case])(r)
    k = r.random()
    if k < 0.4:
        base = allowed_cmd(r)
    elif k < 0.55:
        base = denied_action(r)
    elif k < 0.8:
        base = tricky(r, depth)
    else:
        base = deep(r)
    if r.random() < 0.25:
        base = wrapper(r, base)
    if r.random() < 0.15:
        base = env_prefix(r) + " " + base
    if r.random() < 0.3:
        base = base + " " + redirection(r)
    return base


def env_prefix(r: random.Random) -> str:
    var = r.choice(ENV_VARS)
    value = r.choice(
        [
            ".",
            "/tmp",
            "x",
            "/usr/bin/id",
            "touch p",
            "$(touch e)",
            "'a b'",
            "",
            "gitcfg",
            "bashenv",
            "bin",
            "bin:$PATH",
        ]
    )
    if var == "BASH_CMDS":
        return r.choice(["BASH_CMDS[echo]=/usr/bin/id", "BASH_CMDS[cat]=/usr/bin/touch"])
    if var.startswith("GIT_CONFIG") and r.random() < 0.5:
        return (
            "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor "
            f"GIT_CONFIG_VALUE_0={word(r, 'touch fsmon')}"
        )
    return f"{var}={word(r, value) if value else ''}"


def wrapper(r: random.Random, cmd: str) -> str:
    w = r.choice(
        [
            "env",
            "env -i",
            "env -u HOME",
            "env FOO=1",
            "env -S",
            "env --",
            "timeout 5",
            "timeout -s KILL 5",
            "timeout -k 1 5",
            "timeout --foreground 2",
            "timeout 5s",
            "nice",
            "nice -n 5",
            "nice -5",
            "nice --adjustment=3",
            "ionice -c 3",
            "ionice -c3",
            "ionice -n7",
            "ionice -t -c2",
            "ionice -p",
            "stdbuf -o0",
            "stdbuf -oL",
            "stdbuf --output=L",
            "stdbuf -i 0",
            "setsid",
            "setsid -f",
            "setsid -w",
            "nohup",
            "time",
            "time -p",
            "command",
            "command -p",
            "command -v",
            "builtin",
            "exec",
            "exec -a echo",
            "exec -c",
            "xargs",
            "xargs -0",
            "xargs -r",
            "xargs -n1",
            "xargs -n 1",
            "xargs -I{}",
            "xargs -I {}",
            "xargs -i",
            "xargs -a x.txt",
            "xargs --arg-file=x.txt",
            "xargs -d '\\n'",
            "xargs -E x",
            "xargs -eX",
            "xargs -s 100",
            "xargs -P2",
            "xargs -L1",
            "xargs -t",
            "xargs -p",
            "xargs --null",
            "nice -n",
            "timeout",
            "chrt 0",
            "taskset 1",
        ]
    )
    if w == "env -S":
        return f"env -S {word(r, cmd)}"
    if w.startswith("xargs") and r.random() < 0.5:
        return f"echo {word(r, r.choice(['x.txt', 'touch', 'rm -f x.txt', 'id']))} | {w} {cmd}"
    return f"{w} {cmd}"


def redirection(r: random.Random) -> str:
    target = r.choice(
        [
            "out",
            "/dev/null",
            "/dev/stdout",
            "/dev/stderr",
            "/dev/tty",
            "x.txt",
            "/dev/fd/1",
            "/dev/fd/3/../../etc/x",
            "/dev/fd/0/..",
            "/proc/self/fd/1",
            "$HOME/.bashrc",
            "~/.gitconfig",
            "/tmp/f",
            "'o u t'",
            "$(echo out)",
            r.choice(NET_TARGETS),
        ]
    )
    op = r.choice(
        [
            ">",
            ">>",
            ">|",
            "&>",
            "&>>",
            "<>",
            "<",
            "2>",
            "1>",
            "3>",
            "<<<",
            ">&",
            "2>&1 >",
            "0<",
            "9<>",
        ]
    )
    if op == ">&" and r.random() < 0.5:
        return r.choice([">&2", "2>&1", "1>&-", "3>&1", ">&3", "<&0"])
    return f"{op}{r.choice(['', ' '])}{target}"


def heredoc(r: random.Random) -> str:
    delim = r.choice(
        [
            "EOF",
            "'EOF'",
            '"EOF"',
            "E'O'F",
            "\\EOF",
            "E$F",
            "'E$F'",
            "$EOF",
            'E"O"F',
            "EO\\F",
            "-",
            "EOF)",
            "'E O F'",
            "${x}",
        ]
    )
    plain = delim.replace("'", "").replace('"', "").replace("\\", "")
    body = r.choice(["hi", "$(touch hd)", "`id`", "${x:-$(id)}", "EOF", "$'\\x41'", "\\", "a\\\nb"])
    op = r.choice(["<<", "<<-", "<< "])
    head = r.choice(["cat", "grep x", "wc -l", "echo", "sh", "bash", "read -r v"])
    end = r.choice([plain, plain + " ", "\t" + plain, plain.upper(), delim])
    after = r.choice(["", "\necho done", "\n" + denied_action(r), "; echo x"])
    if r.random() < 0.3:
        return f"echo $({head} {op}{delim}\n{body}\n{end}\n){after}"
    return f"{head} {op}{delim}{r.choice(['', ' | cat', ' && echo y'])}\n{body}\n{end}{after}"


def tricky(r: random.Random, depth: int) -> str:
    bad = denied_action(r)
    q = word(r, bad)
    forms: list[Callable[[], str]] = [
        lambda: f"echo $({bad})",
        lambda: f"echo `{bad}`",
        lambda: f'echo "$({bad})"',
        lambda: f"cat <({bad})",
        lambda: f"echo hi >({bad})",
        lambda: f"cat <(echo)#\n{bad}",
        lambda: f"cat <(echo)#{bad}",
        lambda: f"echo $'\\\\'' ; {bad} ; '",
        lambda: f"echo $'a\\'' ; {bad} #'",
        lambda: f"echo ${{x:-$({bad})}}",
        lambda: f'echo "${{x:-}}"$({bad})',
        lambda: f"echo ${{x:-}}}}; {bad}",
        lambda: f'echo ${{x/a/"}}"}}; {bad}',
        lambda: f"x={word(r, bad)}; echo ${{x@P}}",
        lambda: f"x='$({bad})'; echo ${{x@P}}",
        lambda: f"x={word(r, bad.split()[0])}; ${{x}} {' '.join(bad.split()[1:])}",
        lambda: f"y=x; x={word(r, bad)}; echo ${{!y}}",
        lambda: f"a[$({bad})]=1",
        lambda: f"echo $(( a[$({bad})] ))",
        lambda: f"(( a[$({bad})] ))",
        lambda: f"let 'a[$({bad})]=1'",
        lambda: f"declare -a 'a[$({bad})]'",
        lambda: f"declare x='$({bad})'",
        lambda: f"printf -v 'a[$({bad})]' %s 1",
        lambda: f'printf -v x %s {q}; eval "$x"',
        lambda: f"read -r 'a[$({bad})]' <<< x",
        lambda: f'mapfile -t a <<< {q}; "${{a[@]}}"',
        lambda: f"arr=({q}); ${{arr[@]}}",
        lambda: f"eval {q}",
        lambda: f'eval "echo hi; {bad}"',
        lambda: f"sh -c {q}",
        lambda: f"dash -c {q}",
        lambda: f"bash -c {q}",
        lambda: f"sh -c 'echo $1' _ {q}",
        lambda: 'sh -c "echo \\"\\$(id)\\""',
        lambda: f"bash -c 'echo hi' && {bad}",
        lambda: heredoc(r),
        lambda: f"echo hi \\\n; {bad}",
        lambda: f"echo $\\\n({bad})",
        lambda: f'echo "$\\\n({bad})"',
        lambda: f"e\\\ncho hi; {bad}" if r.random() < 0.5 else f"ec\\\nho $({bad})",
        lambda: f"if true; then {simple(r, depth + 1) if depth < 2 else bad}; fi",
        lambda: f"for i in a b; do {bad}; done",
        lambda: f"for ((i=0;i<1;i++)); do {bad}; done",
        lambda: f"while false; do :; done; {bad}",
        lambda: f"case x in x) {bad};; esac",
        lambda: f"select v in a; do {bad}; done",
        lambda: f"f() {{ {bad}; }}; f",
        lambda: f"function f {{ {bad}; }}; f",
        lambda: f"coproc {bad}",
        lambda: f"{{ {bad}; }}",
        lambda: f"( {bad} )",
        lambda: f"shopt -s expand_aliases; alias e={word(r, bad)}\ne",
        lambda: f"alias echo={word(r, bad)}; echo hi",
        lambda: f"source <(echo {q})",
        lambda: f". /dev/stdin <<< {q}",
        lambda: f"enable -n echo; echo hi; {bad}",
        lambda: "hash -p /usr/bin/id echo; echo hi",
        lambda: f"trap {q} EXIT; echo hi",
        lambda: f"find . -maxdepth 0 {r.choice(['-exec', '-execdir', '-ok'])} {bad} \\;",
        lambda: f"echo x | xargs -I{{}} {bad}",
        lambda: f"exec 3<>{r.choice(NET_TARGETS)}; echo hi >&3",
        lambda: f"echo hi > {r.choice(NET_TARGETS)}",
        lambda: f"cat < {r.choice(NET_TARGETS)}",
        lambda: f"echo {q} | sh",
        lambda: "PATH=.:$PATH ls",
        lambda: "IFS=_; x=touch_p; $x",
        lambda: f"echo hi # ; {bad}",
        lambda: f"echo hi #\\\n{bad}",
        lambda: f"echo 'a'\"b\"$'c'{q}",
        lambda: f"command {bad}",
        lambda: f"builtin echo hi; {bad}",
        lambda: f"exec {bad}",
        lambda: f"time {bad}",
        lambda: f"echo hi & {bad}",
        lambda: f"! {bad}",
        lambda: f"echo hi |& {bad}",
        lambda: f"cat x.txt > {word(r, 'out')}",
        lambda: f"echo hi 2>{word(r, 'err')}",
        lambda: f"git status; git {r.choice(['log', 'config a.b c', 'init q', 'stash'])}",
        lambda: f"git -c core.fsmonitor={word(r, 'touch z')} status",
        lambda: f"git {r.choice(['--git-dir=.', '-C .', '--exec-path=.', '-p'])} status",
        lambda: (
            f"{r.choice(HIJACK_PREFIXES)} {r.choice(['git status', 'echo hi', 'ls', 'cat x.txt', 'bash -c true', 'sh -c true', 'git st'])}"
        ),
        lambda: (
            f"export {r.choice(HIJACK_PREFIXES)}; {r.choice(['git status', 'echo hi', 'ls', 'cat x.txt'])}"
        ),
        lambda: f"git -c include.path={word(r, 'gitcfg')} status",
        lambda: "hash -p bin/echo echo; echo hi",
        lambda: f"cd bin; PATH=. {r.choice(['echo', 'ls', 'cat'])} hi",
        lambda: f"sh -c \"echo \\$'\\\\'; {bad}; #'\"",
        lambda: f"dash -c 'echo $'\"'\"'\\'\"'\"'; {bad}; #'",
        lambda: f"echo ${{x:-`{bad}`}}",
        lambda: f'echo "${{x:-$({bad})}}"',
        lambda: f"echo ${{x:->({bad})}}",
        lambda: f"echo ${{x:-\\\n$({bad})}}",
        lambda: f"echo $(cat <<'E'\n)\nE\n); {bad}",
        lambda: f"echo $(cat <<E\n$({bad})\nE\n)",
        lambda: f"cat <<E$(\n{bad}\n)\nx\nE",
        lambda: (
            f"echo hi 3<{r.choice(['.', 'bin', '/tmp'])} >/dev/fd/3/{r.choice(['../pwn', 'pwn', '../../tmp/pwn', './x'])}"
        ),
        lambda: f"exec 4<.; cat x.txt >>/dev/fd/4/{r.choice(['pwn', 'bin/../y'])}",
        lambda: reopen(r),
        lambda: reopen(r),
        lambda: nested_dialect(r),
        lambda: digit_descriptor(r),
    ]
    return r.choice(forms)()


def reopen(r: random.Random) -> str:
    """A write through a descriptor path (`/dev/stdin`, `/dev/fd/N`, `/proc/self/fd/N`)
    after a redirection (of the command, a group or loop around it, or the command
    running a nested script) gave that descriptor a file: it rewrites the file."""
    n = r.choice([0, 1, 2, 3, 5])
    source = r.choice(["x.txt", "README", "gitcfg", ".gitconfig"])
    give = r.choice([f"{n}<{source}" if n else f"<{source}", f"9<{source} {n}<&9"])
    target = r.choice(
        {0: ["/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"], 1: ["/dev/stdout", "/dev/fd/1"],
         2: ["/dev/stderr", "/dev/fd/2"]}.get(n, [f"/dev/fd/{n}", f"/proc/self/fd/{n}"])
    )
    op = r.choice([">", ">>", ">|", "&>"])
    cmd = allowed_cmd(r)
    return r.choice(
        [
            f"{cmd} {give} {op}{target}",
            f"{{ {cmd} {op}{target}; }} {give}",
            f"for i in 1; do {cmd} {op}{target}; done {give}",
            f"while true; do {cmd} {op}{target}; break; done {give}",
            f"sh -c {word(r, f'{cmd} >{target}')} {give}",
            f"bash -c {word(r, f'eval {cmd} >{target}')} {give}",
            f"( {cmd} {op}{target} ) {give}",
            f"echo x | xargs -I{{}} sh -c 'echo >{target}' {give}",
        ]
    )


def nested_dialect(r: random.Random) -> str:
    """bash-only syntax inside a script dash runs (`sh -c`, `flock -c`, `watch`)."""
    bad = r.choice(["rm", "touch", "id"])
    inner = r.choice(
        [
            f"env -u{{x,}} {bad} ls",
            f"echo {{a,b}}; env -u{{HOME,}} {bad} p",
            f"$'{bad}' p",
            f"echo $'\\x41'; {bad} p",
            f"exec -c {bad}",
            f"exec -a echo {bad} p",
            f"builtin echo hi; {bad} p",
            "echo a 12>x.txt",
            f"[[ a ]] && {bad} p",
        ]
    )
    return r.choice(
        [
            f"sh -c {word(r, f'eval {word(r, inner)}')}",
            f"dash -c {word(r, inner)}",
            f"sh -c {word(r, inner)}",
            f"flock x.txt -c {word(r, inner)}",
            f"bash -c {word(r, f'sh -c {word(r, inner)}')}",
        ]
    )


def digit_descriptor(r: random.Random) -> str:
    """A digit run before `<`/`>`: a descriptor in bash only within `int`, in dash
    only as one digit; otherwise a word of the command."""
    digits = r.choice(["1", "12", "0001", "2147483647", "2147483648", "99999999999", "2&"])
    cmd = r.choice(["echo a", "git status", "cat", "ls"])
    redirect = r.choice([">x.txt", ">/dev/null", "<x.txt", ">&2", "<&0"])
    text = f"{cmd} {digits}{redirect}"
    return r.choice([text, f"sh -c {word(r, text)}"])


def compound(r: random.Random, depth: int = 0) -> str:
    parts = [simple(r, depth) for _ in range(r.randint(1, 3))]
    out = parts[0]
    for part in parts[1:]:
        out += r.choice(["; ", " && ", " || ", " | ", "\n", " & ", " |& ", ";"]) + part
    if r.random() < 0.1:
        out = r.choice(["( ", "{ "]) + out + r.choice([" )", "; }"])
    return out


def generate(seed: int, index: int, fragments: list[str]) -> str:
    """Case `index` of run `seed`: a grammar case, sometimes mutated (loopback-only)."""
    r = random.Random(f"{seed}:{index}")
    while True:
        if r.random() < 0.35:
            source = r.choice([*SEED_CORPUS, *fragments]) if fragments else r.choice(SEED_CORPUS)
            case = mutate(
                r, source if r.random() < 0.5 else compound(r), [*fragments, *SEED_CORPUS]
            )
        else:
            case = compound(r)
        if len(case) <= MAX_CASE_CHARS and net_safe(case):
            return case
