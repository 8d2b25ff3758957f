"""The broker's budget estimates images by the API's formula from their dimensions,
read from PNG, JPEG, GIF and WebP headers, and never below what a model bills; an
image it cannot measure counts as the most an image costs."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from orchestrator.broker.budget import BYTES_PER_TOKEN_ESTIMATE, estimate_input_tokens
from orchestrator.broker.image_tokens import (
    MAX_IMAGE_TOKENS,
    image_size,
    image_tokens,
    images_in,
)
from orchestrator.jsontypes import JSONObject


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    rows = b"".join(b"\0" + bytes((width + 7) // 8) for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


def jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0"
    exif = b"\xff\xe1" + struct.pack(">H", 2 + 5000) + b"x" * 5000
    sof = b"\xff\xc2" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + exif + sof + b"\xff\xd9"


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\0\0\0;"


def webp_vp8x(width: int, height: int) -> bytes:
    body = b"VP8X" + struct.pack("<I", 10) + b"\0\0\0\0"
    body += (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", len(body) + 4) + b"WEBP" + body


def webp_lossless(width: int, height: int) -> bytes:
    bits = (width - 1) | ((height - 1) << 14)
    body = b"VP8L" + struct.pack("<I", 5) + b"\x2f" + bits.to_bytes(4, "little")
    return b"RIFF" + struct.pack("<I", len(body) + 4) + b"WEBP" + body


@pytest.mark.parametrize("make", [png, jpeg, gif, webp_vp8x, webp_lossless])
def test_dimensions_are_read_from_each_format(make: object) -> None:
    assert callable(make)
    assert image_size(make(1000, 600)) == (1000, 600)


def test_the_formula_and_the_scaling() -> None:
    assert image_tokens(200, 200) == 54  # the guide's table: ~54
    assert image_tokens(1000, 1000) == 1334  # ~1334
    assert image_tokens(1092, 1092) == 1590  # ~1590
    # Too large: scaled down, never past the most any model bills.
    assert image_tokens(8000, 8000) == MAX_IMAGE_TOKENS
    assert image_tokens(8000, 10) <= MAX_IMAGE_TOKENS


def test_unreadable_or_unmeasurable_images_count_as_the_maximum() -> None:
    garbage: JSONObject = {
        "type": "image",
        "source": {"type": "base64", "data": "bm90IGFuIGltYWdl"},
    }
    url: JSONObject = {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}
    file: JSONObject = {"type": "image", "source": {"type": "file", "file_id": "f"}}
    assert images_in([garbage, url, file], 100)[0] == 3 * MAX_IMAGE_TOKENS


def test_tiny_compressible_images_are_estimated_by_pixels_not_bytes() -> None:
    data = base64.b64encode(png(1000, 1000)).decode()
    assert len(data) < 400  # a megapixel in a few hundred bytes
    image: JSONObject = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": data},
    }
    # Nested anywhere (inside a tool result here), each one still counts.
    body: JSONObject = {
        "messages": [
            {"role": "user", "content": [{"type": "tool_result", "content": [image] * 100}]}
        ]
    }
    size = len(str(body))
    estimate = estimate_input_tokens(body, size)
    assert estimate >= 100 * 1334
    assert estimate < 100 * 1334 + size // BYTES_PER_TOKEN_ESTIMATE
