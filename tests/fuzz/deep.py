"""Deeper grammar forms: where an analyser that handles the plain cases can still be
wrong about what bash runs.

- wrapper option arity, from the manuals of the versions in the oracle image
  (coreutils 9.1, util-linux 2.38, findutils 4.9, bash 5.2): an option that takes
  a value placed before an allowed name, or a flag placed before a denied one;
- arithmetic contexts that evaluate a variable's value as an expression (and so
  its array subscripts, and so `$( )` inside them): `$((x))`, `${a[i]}`,
  `${x:i}`, `[[ i -eq 0 ]]`, `printf -v 'a[i]'`, `${!x}`...;
- heredoc terminators next to CR, backslash-newline in quoted bodies, tabs;
- redirections in every position and spelling (`>&word`, `{fd}>`, `0>`, `<>`,
  a process substitution as the target);
- functions named like allowed programs, `source` of workspace files, `eval` of
  escaped substitutions, `case` patterns and `[[ ]]` operands that expand;
- `[[ … ]]` arithmetic comparisons in every spelling, and text words next to them;
- `echo OPENER SEP BAD CLOSER`: quote and comment look-alikes.
"""

from __future__ import annotations

import random

WRAPPER_OPTIONS: dict[str, tuple[list[str], list[str]]] = {
    # wrapper: (options that take a value, as spelled before it; flags)
    "env": (
        ["-u", "-C", "-S", "--unset", "--chdir", "--split-string"],
        [
            "-i",
            "-0",
            "-v",
            "--ignore-environment",
            "--null",
            "--debug",
            "-",
            "--",
            "--default-signal",
            "--ignore-signal",
            "--block-signal",
            "-iv",
        ],
    ),
    "timeout": (
        ["-k", "-s", "--kill-after", "--signal"],
        ["-f", "-p", "-v", "--foreground", "--preserve-status", "--verbose", "--"],
    ),
    "nice": (["-n", "--adjustment"], ["--"]),
    "ionice": (["-c", "-n", "-p", "-P", "-u", "--class", "--classdata"], ["-t", "--ignore"]),
    "stdbuf": (["-i", "-o", "-e", "--input", "--output", "--error"], ["--"]),
    "setsid": ([], ["-c", "-f", "-w", "--ctty", "--fork", "--wait", "--"]),
    "nohup": ([], ["--"]),
    "xargs": (
        [
            "-a",
            "-d",
            "-E",
            "-I",
            "-L",
            "-n",
            "-P",
            "-s",
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-chars",
            "--process-slot-var",
        ],
        [
            "-0",
            "-e",
            "-i",
            "-l",
            "-o",
            "-p",
            "-r",
            "-t",
            "-x",
            "--null",
            "--verbose",
            "--no-run-if-empty",
            "--exit",
            "--open-tty",
            "--interactive",
            "--eof",
            "--replace",
            "--max-lines",
        ],
    ),
    "command": ([], ["-p", "-v", "-V", "--"]),
    "exec": (["-a"], ["-c", "-l", "-cl", "--"]),
    "time": ([], ["-p", "--"]),
    "builtin": ([], ["--"]),
    "chrt": (["-p"], ["-o", "-b", "-f", "-r", "-i", "-a", "-m"]),
    "taskset": (["-p"], ["-a", "-c"]),
    "flock": (["-w", "-E", "-c"], ["-s", "-x", "-n", "-u", "-o"]),
}
VALUES = {
    "-k": "1",
    "-s": "KILL",
    "-n": "5",
    "-c": "3",
    "-u": "HOME",
    "-C": ".",
    "-i": "0",
    "-o": "L",
    "-e": "0",
    "-a": "x.txt",
    "-d": "x",
    "-E": "x",
    "-I": "{}",
    "-L": "1",
    "-P": "1",
    "-p": "1",
    "-w": "1",
}
DENIED_WORDS = ["touch", "rm", "id", "mkdir", "tee", "python3", "sh"]


def _value_for(option: str) -> str:
    return VALUES.get(option[:2], "1" if option.startswith("--") else "x")


def wrapper_arity(r: random.Random) -> str:
    """A wrapper with an option whose arity a parser could get wrong, around a
    command where that mistake turns `echo` into the command bash does not run."""
    name = r.choice(list(WRAPPER_OPTIONS))
    with_value, flags = WRAPPER_OPTIONS[name]
    bad = r.choice(DENIED_WORDS)
    allowed = r.choice(["echo", "cat", "ls", "wc", "true", "date"])
    lead = {"timeout": "5 ", "nice": "", "chrt": "0 ", "taskset": "1 ", "flock": "x.txt "}
    forms = []
    if with_value:
        opt = r.choice(with_value)
        forms += [
            f"{name} {opt} {allowed} {bad} pwn",  # value swallows the allowed name
            f"{name} {opt}{allowed} {bad} pwn"
            if not opt.startswith("--")
            else f"{name} {opt}={allowed} {bad} pwn",
            f"{name} {opt} {_value_for(opt)} {lead.get(name, '')}{allowed} hi",
        ]
    if flags:
        flag = r.choice(flags)
        forms += [
            f"{name} {flag} {lead.get(name, '')}{bad} {allowed}",  # a flag taken for a value
            f"{name} {flag} {lead.get(name, '')}{allowed} hi",
            f"{name} {flag}{r.choice(['', '=' + allowed])} {lead.get(name, '')}{bad} x",
        ]
    text = r.choice(forms)
    if name == "xargs" and r.random() < 0.7:
        text = f"echo {r.choice(['x', allowed, bad])} | {text}"
    return text


ARITH_USES = [
    "echo $((i))",
    "echo $((i+1))",
    "echo ${a[i]}",
    'echo "${a[i]}"',
    "echo ${x:i}",
    "echo ${x:0:i}",
    "echo ${a[@]:i}",
    "[[ i -eq 0 ]]",
    "[[ $i -eq 0 ]]",
    "(( i ))",
    "let i",
    "printf -v 'a[i]' %s 1",
    "printf -v a[i] %s 1",
    "echo $[i]",
    "a[i]=1",
    "echo ${!i}",
    "echo ${!i@}",
    "declare -i j=i",
    "for ((j=i; j<0; j++)); do :; done",
    "echo ${#a[i]}",
    "echo ${a[i]:-x}",
    "test $i -eq 0",
    "[ $i -eq 0 ]",
    "echo ${i@P}",
    "read -r 'a[i]' <<< 1",
    "echo $(( a[i] ))",
    "cat x.txt | head -n i",
    "echo ${a[$i]}",
]


def arith_recursion(r: random.Random, bad: str) -> str:
    """A variable whose value is an expression with a `$( )` subscript, then a
    context that evaluates it arithmetically (or as a name)."""
    value = r.choice(
        [
            f"'a[$({bad})]'",
            f'"a[\\$({bad})]"',
            f"a[\\$\\({bad.replace(' ', chr(92) + ' ')}\\)]",
            f"'x[`{bad}`]'",
            f"'$({bad})'",
        ]
    )
    setter = r.choice(
        [
            f"i={value}",
            f"declare i={value}",
            f"export i={value}",
            f"read -r i <<< {value}",
            f"printf -v i %s {value}",
        ]
    )
    return f"{setter}; {r.choice(ARITH_USES)}"


def heredoc_terminators(r: random.Random, bad: str) -> str:
    """Heredocs whose end a parser could place where bash does not."""
    delim = r.choice(["EOF", "'EOF'", '"EOF"', "\\EOF", "E\\OF", "'E'OF"])
    plain = "EOF"
    near = r.choice(
        [
            plain,
            plain + "\r",
            plain + " ",
            "\t" + plain,
            plain + "\\",
            "x\\\n" + plain,
            plain + "\\\n",
            "EO\\\nF",
            "$" + plain,
            "'" + plain + "'",
        ]
    )
    op = r.choice(["<<", "<<-", "<< "])
    head = r.choice(["cat", "wc -l", "grep x", "cat -", "true"])
    tail = r.choice([f"\n{bad}\n{plain}\n", f"\n{bad}\n", f"\n{bad}; echo\n\t{plain}\n"])
    return f"{head} {op}{delim}\nhi\n{near}{tail}"


def odd_whitespace(r: random.Random, bad: str) -> str:
    """Characters Python calls whitespace or line breaks and bash does not (and back)."""
    ch = r.choice(
        ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u00a0", "\r\n"]
    )
    return r.choice(
        [
            f"echo hi \\{ch}\n{bad}",
            f"echo hi #{ch}{bad}",
            f"echo hi{ch}{bad}",
            f"echo 'a{ch}b' \\\r\n{bad}",
            f"cat <<EOF\nEOF{ch}\n{bad}\nEOF\n",
            f"echo $'{ch}'; {bad}",
            f"echo hi\\{ch}{bad}",
            f"{bad.split()[0]}{ch}x",
            f"echo x{ch}; {bad}",
        ]
    )


def redirect_forms(r: random.Random, bad: str) -> str:
    target = r.choice(["out", "x.txt", "'o u'", "$HOME/h", "bin/echo", ".git/config", "*.txt"])
    return r.choice(
        [
            f">{target} echo hi",
            f"echo hi >&{target}",
            f"echo hi >& {target}",
            f"cat 0>{target}",
            f"cat <>{target}",
            f"echo hi {{fd}}>{target}",
            f"exec {{fd}}>{target}",
            f"exec >{target}",
            f"echo hi 1>>{target}",
            f"echo hi 2>{target}",
            f"echo hi > >({bad})",
            f"cat < <({bad})",
            f"echo hi 2>&1>{target}",
            f"echo hi >>{target}|cat",
            f"echo hi >\\\n{target}",
            f"echo hi \\>{target}",
            f"echo hi '>'{target}",
            f"echo hi 3>{target} >&3",
            f"echo hi >/dev/stdout/../{target}",
            f"echo hi >/dev/null{target}",
            "echo hi >/dev/nul\\\nl",
            f"echo hi >{{/dev/null,{target}}}",
            "echo hi >/dev/std{out,err}",
            f"exec 3>&1 >{target}",
            f"echo hi 9>{target}",
        ]
    )


def misc_forms(r: random.Random, bad: str) -> str:
    name = r.choice(["echo", "cat", "ls", "true", "printf"])
    return r.choice(
        [
            f"{name}() {{ {bad}; }}; {name} hi",
            f"function {name} {{ {bad}; }}; {name}",
            f"{name}() ( {bad} ); {name}",
            f"alias {name}='{bad}'; {name}",
            ". bashenv",
            "source x.txt",
            ". ./x.txt",
            "source bashenv; echo",
            f"eval echo \\$\\({bad}\\)",
            f"eval 'echo $(' {bad} ')'",
            f'eval "$(echo {bad})"',
            f"case $({bad}) in *) echo;; esac",
            f"case x in $({bad})) echo;; esac",
            f"case x in x) echo hi;; $({bad})) ;; esac",
            f"[[ $({bad}) ]]",
            f"[[ -n `{bad}` ]]",
            f"[[ 1 -eq 'a[$({bad})]' ]]",
            f"[[ -v 'a[$({bad})]' ]]",
            f"echo $(case x in x) {bad};; esac)",
            f"echo $( # )\n{bad}\n)",
            f"echo `echo \\`{bad}\\``",
            f'echo "$(echo ")"; {bad}; echo "(")"',
            f"echo $(echo ')'; {bad})",
            f'echo "`echo \\"\\`{bad}\\`\\"`"',
            f"for x in $({bad}); do echo; done",
            "while read -r l; do $l; done < x.txt",
            "cat x.txt | while read -r c; do $c; done",
            f"sh -c '\"$0\" x' {bad.split()[0]}",
            f"bash -c '$1 x' _ {bad.split()[0]}",
            f'sh -c "$(echo {bad})"',
            f"x={bad.split()[0]}; ${{x}} x",
            f'"${{x:-{bad.split()[0]}}}" x',
            f"echo ${{x:-$'\\x24'({bad})}}",
            f'echo $"$({bad})"',
            f"echo $'$({bad})'; echo \"$'\"$({bad})",
            f"{{ {bad}; }} >/dev/null",
            f"! {bad}",
            f"time {bad}",
            f"echo hi & {bad} &",
            f"echo hi; exec {bad}",
            f"echo hi\n{bad}",
            f"echo hi;;{bad}",
            f"echo hi |& {bad}",
            f"coproc {{ {bad}; }}",
            f"echo ${{x:-`{bad}`}}",
            f"echo ${{x#$({bad})}}",
            f"echo ${{x/$({bad})/}}",
            f"echo ${{x:-{{}}$({bad})}}",
            f"echo ${{x:-'}}'$({bad})'}}",
            f'echo "${{x:-"}}"$({bad})"}}"',
        ]
    )


def deep(r: random.Random) -> str:
    bad = r.choice(
        [
            "touch pwn",
            "rm -f x.txt",
            "id",
            "mkdir d",
            "tee t </dev/null",
            "python3 -c 1",
            "git config a.b c",
            "cp x.txt c",
            "chmod 600 x.txt",
        ]
    )
    pick = r.random()
    if pick < 0.25:
        return quote_confusion(r, bad)
    if pick < 0.4:
        return wrapper_arity(r)
    if pick < 0.45:
        return arith_recursion(r, bad)
    if pick < 0.5:
        return cond_forms(r, bad)
    if pick < 0.55:
        return heredoc_terminators(r, bad)
    if pick < 0.6:
        return brace_forms(r, bad)
    if pick < 0.7:
        return odd_whitespace(r, bad)
    if pick < 0.85:
        return redirect_forms(r, bad)
    return misc_forms(r, bad)


OPENERS = [
    "a#b",
    "a#",
    "$#",
    "${#}",
    "'a'#",
    '"a"#',
    "$'a'#",
    "a\\ #",
    "$(echo)#",
    "${x}#",
    "{a,b}#",
    "<(echo)#",
    "a=#",
    "\\#",
    "'#'",
    '"#"',
    "\\'",
    '\\"',
    "'a\\'",
    '"a\\\\"',
    "$'a\\\\'",
    "$'a\\''",
    '$"a\\\\"',
    "\\\\",
    "a\\;",
    "a\\\\",
    "\"$(echo ')')\"",
    '"$(echo \\")\\")"',
    "$((1))",
    "${x:-'}'}",
    '${x:-"}"}',
    "`echo \\`echo\\``",
    '"`echo "`"`"',
    "\\`",
    "$(echo ')')",
    "$( case x in x) echo;; esac )",
    "x\\\n#",
    '"a\\\n"',
    "'a\\\n'",
    "$'\\''\\'",
]
SEPARATORS = [";", " ; ", "\n", " && ", " || ", "|", " & ", ";;", " ;& ", "|&", "&&\\\n"]
CLOSERS = ["", " #'", ' #"', " #`", " #)", " #}", "'", '"', " # '\"`)}", ")", "}"]


def quote_confusion(r: random.Random, bad: str) -> str:
    """`echo OPENER SEP BAD CLOSER`: bash runs BAD unless OPENER really opens a quote
    or comment; a reader that misjudges OPENER thinks BAD is inert text."""
    return f"echo {r.choice(OPENERS)}{r.choice(SEPARATORS)}{bad}{r.choice(CLOSERS)}"


ARITH_OPS = ["-eq", "-ne", "-lt", "-le", "-gt", "-ge"]


def _spell(r: random.Random, op: str) -> str:
    """An operator as written: plain, quoted, escaped or split by a line continuation."""
    return r.choice([op, f'"{op}"', f"'{op}'", f"\\{op}", f"{op[:2]}\\\n{op[2:]}", f"$'{op}'", op])


def cond_forms(r: random.Random, bad: str) -> str:
    """`[[ … ]]` whose operands bash evaluates as arithmetic (so their subscripts run)."""
    operand = r.choice([f"'a[$({bad})]'", f'"a[\\$({bad})]"', "i", "$i", '"$i"', "a[i]", "x[$i]"])
    setup = r.choice(["", f"i='a[$({bad})]'; ", f"i=a[\\$\\({bad.split()[0]}\\)]; "])
    op = _spell(r, r.choice(ARITH_OPS))
    other = r.choice(["1", "0", operand])
    core = r.choice(
        [
            f"{other} {op} {operand}",
            f"{operand} {op} {other}",
            f"( 1 {op} {operand} )",
            f"1 == 1 && 1 {op} {operand}",
            f"! 1 {op} {operand}",
            f"-n x || 0 {op} {operand}",
            f"-z $({bad})",
            f"x == $({bad})",
            f"x == @(a|$({bad}))",
            f"-f `{bad}`",
            f"x < $({bad})",
            f"-o {operand}",
            f"-t {operand}",
            f"-v {operand}",
            f"-R {operand}",
            f"x =~ $({bad})",
        ]
    )
    return f"{setup}[[ {core} ]]" + r.choice(["", " && echo y", "; echo"])


def brace_forms(r: random.Random, bad: str) -> str:
    """Brace expansion that moves words between roles: into the command name, a
    wrapper's options or command, a redirection target; empty and quoted members."""
    name, arg = ([*bad.split(), "x"])[:2]
    wrapper = r.choice(["timeout 5", "nice", "env", "xargs", "stdbuf -o0", "setsid", "command"])
    return r.choice(
        [
            f"{{,{name}}} {arg}",
            f"{{{name},}} {arg}",
            f"echo {{a,b}} && {{{name},{arg}}}",
            f"{wrapper} {{,{name}}} {arg}",
            f"{wrapper} {{{name},}} {arg}",
            f"{wrapper} {{echo,{name}}}",
            f"{wrapper} {{-n,5}} {{{name},x}}",
            f"env {{-S,{name}\\ {arg}}}",
            "echo {a,b} >{out,/dev/null}",
            "echo hi{,\\ >out}",
            f"echo {{a,'}}'}}; {bad} #'}}",
            f'echo {{a,"}}"}}; {bad}',
            f"{{{name[0]}..{name[0]}}}{name[1:]} {arg}",
            f"echo {{a,$({bad})}}",
            f"echo {{$({bad}),b}}",
            f"ls src/*.{{js,ts}}; {bad}",
            f"echo {{a,b}}\\\n; {bad}",
            f"cat {{x.txt,`{bad}`}}",
            "echo {a,b}{c,d}",
            f"nice {{-n,5}} {{echo,{name}}} {arg}",
            f"timeout {{5,{name}}} {arg}",
        ]
    )
