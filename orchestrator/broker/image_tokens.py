"""Input tokens of the images in a Messages API request, from their dimensions.

The API bills an image by its pixel area, not by its bytes (Anthropic's vision
guide, "Calculate image costs"): `tokens = (width px * height px) / 750`, after an
image too large is scaled down, aspect ratio kept, until its long edge and its
token count are within the model's limits. A tiny, highly compressible PNG of
1000x1000 px is a few hundred bytes and about 1,334 tokens, so a byte-based
estimate lets a request with a hundred of them through a budget it then overruns
tenfold. The broker therefore reads each base64 image's width and height from its
header (PNG, JPEG, GIF, WebP) and estimates it by that formula, with the largest
limits any current model uses (`MAX_LONG_EDGE_PX`, `MAX_IMAGE_TOKENS`), so the
estimate never falls below what any model bills. An image whose size cannot be
read (a URL or file source, an unknown or malformed header) counts as the most an
image can cost.

Standard library only: a header is a few fixed fields, and no image is decoded.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct

from orchestrator.documents import sourced_blocks
from orchestrator.jsontypes import JSONValue

PIXELS_PER_TOKEN = 750
"""The vision guide's formula: tokens = width * height / 750."""
MAX_LONG_EDGE_PX = 2576
"""Longest edge any current model reads before scaling an image down (older models
scale to 1568 px; the larger limit keeps the estimate an upper bound)."""
MAX_IMAGE_TOKENS = 4784
"""Most tokens one image costs on any current model (older models: about 1,600)."""
HEADER_BASE64_CHARS = 256 * 1024
"""Base64 characters decoded per image to find its dimensions (a JPEG's frame header
can follow large metadata segments; past this the image counts as the maximum)."""


def image_tokens(width: int, height: int) -> int:
    """Tokens for an image of `width` x `height` px, scaled down as the API does."""
    if width <= 0 or height <= 0:
        return MAX_IMAGE_TOKENS
    long_edge = max(width, height)
    scale = min(1.0, MAX_LONG_EDGE_PX / long_edge)
    area = (width * scale) * (height * scale)
    return min(MAX_IMAGE_TOKENS, max(1, math.ceil(area / PIXELS_PER_TOKEN)))


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, JPEG, GIF or WebP header; None when unreadable."""
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
            w, h = struct.unpack(">II", data[16:24])
            return int(w), int(h)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            w, h = struct.unpack("<HH", data[6:10])
            return int(w), int(h)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_size(data)
        if data[:2] == b"\xff\xd8":
            return _jpeg_size(data)
    except struct.error:
        return None
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h
    if chunk == b"VP8L" and data[20:21] == b"\x2f":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        w, h = struct.unpack("<HH", data[26:30])
        return int(w) & 0x3FFF, int(h) & 0x3FFF
    return None


_JPEG_FRAMES = frozenset(
    {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
)
"""Start-of-frame markers (every SOFn but DHT 0xC4, JPG 0xC8, DAC 0xCC)."""


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if marker in _JPEG_FRAMES:
            h, w = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return int(w), int(h)
        if length < 2:
            return None
        pos += 2 + length
    return None


def base64_image_tokens(data: str) -> int:
    """Tokens for one base64 image (the maximum when its header is unreadable)."""
    head = data[:HEADER_BASE64_CHARS]
    head = head[: len(head) - len(head) % 4]
    try:
        raw = base64.b64decode(head, validate=False)
    except (binascii.Error, ValueError):
        return MAX_IMAGE_TOKENS
    size = image_size(raw)
    return MAX_IMAGE_TOKENS if size is None else image_tokens(*size)


def images_in(value: JSONValue, max_objects: int) -> tuple[int, int]:
    """(estimated tokens of every image block at any depth, base64 characters they
    carry). Walks at most `max_objects` objects (the forwarding check has already
    refused a request with more)."""
    tokens = chars = 0
    for source in sourced_blocks(value, "image", max_objects):
        data = source.get("data")
        if source.get("type") == "base64" and isinstance(data, str):
            tokens += base64_image_tokens(data)
            chars += len(data)
        else:
            tokens += MAX_IMAGE_TOKENS
    return tokens, chars
