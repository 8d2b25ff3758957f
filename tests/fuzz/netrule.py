"""The network rule for generated cases: only loopback addresses may be named.

The grammar only writes 127.0.0.1 and localhost; mutation could change that, so
every case passes `net_safe` before it reaches the oracle.
"""

from __future__ import annotations

import re

_APPROVED = re.compile(r"/dev/(?:tcp|udp)/(?:127\.0\.0\.1|localhost)/\d{1,5}(?![\w.])")
_SUSPECT = re.compile(r"tcp|udp|cp/|dp/|\d+\.\d+\.\d+\.\d+|::|0x[0-9a-f]{4}", re.IGNORECASE)
_ESCAPES = re.compile(
    r"\\(?:x([0-9a-fA-F]{1,2})|u([0-9a-fA-F]{1,4})|U([0-9a-fA-F]{1,8})|([0-7]{1,3}))"
)


def _unescape(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        hexa, u4, u8, octal = m.groups()
        code = int(hexa or u4 or u8, 16) if (hexa or u4 or u8) else int(octal, 8)
        return chr(code) if code < 0x110000 else ""

    return _ESCAPES.sub(one, text)


def net_safe(command: str) -> bool:
    """True when the only network addresses `command` can name are loopback ones.

    Conservative: in the text as written, with ANSI-C escapes decoded, and with quote
    characters and backslash-newlines dropped, once the approved
    `/dev/{tcp,udp}/{127.0.0.1,localhost}/PORT` paths are removed, no other spelling
    of a network path or an IP address may remain."""
    joined = command.replace("\\\n", "")
    variants = [command, joined, _unescape(joined)]
    variants += [re.sub(r"[\"'\\$`]", "", v) for v in variants]
    return not any(_SUSPECT.search(_APPROVED.sub("", v)) for v in variants)
