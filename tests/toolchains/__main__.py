"""`python3 -m tests.toolchains`: build the test toolchain images (cached)."""

from orchestrator.backend.connect import connect
from tests.toolchains import TOOLCHAINS, ensure_toolchain

client = connect()
for name in TOOLCHAINS:
    print(f"toolchain {name}: {ensure_toolchain(client, name)}")
client.close()
