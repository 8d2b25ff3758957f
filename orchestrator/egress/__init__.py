"""Network egress for sandboxes: an allowlisting proxy on the host, one per task.

A sandbox still has no network interface; with egress it gets a second Unix
socket beside its broker's (`proxy.SOCKET_NAME`), and the in-container forwarder
(`sandbox_tools.egress_forward`) passes each 127.0.0.1 connection over it.

- `rules`: host patterns (allow / ask / deny) and how they match
- `sources`: where rules come from (settings, CLI, WebFetch rules, agent files)
- `addresses`: which IP addresses are refused unless a rule names them
- `resolver`: the proxy's own name resolution (the container never resolves)
- `verdict`: one connection's decision, as a `Verdict` (`ConnectionPolicy`)
- `http_head`: one request head, parsed with h11, and the head sent upstream
- `sni`: TLS records: the ClientHello's server name, ServerHello or HelloRetryRequest
- `tunnel`: a CONNECT tunnel's TLS check (every ClientHello names the host)
- `caps`: the default per-task caps (numbers only: the CLI flags read them at start-up)
- `limits`: per-task caps on bytes and connections, and the meter
- `relay`: the checked connection's bytes, moved in the kernel (splice)
- `proxy`: the HTTP CONNECT / plain-HTTP proxy on the Unix socket
- `dial`: the connect to a checked address (never a new name lookup)
- `refusals`: what a refused client is told (a one-line HTTP refusal, a TLS alert)
- `service`: one run's egress: a proxy per task, approvals, audit, summaries

May import: `config`, `errors`, `behavior`, `event_sink` (where its events go), `jsontypes`,
`backend` (sandbox specs, for `warden exec`), `broker` (socket directories and peer
checks), `permissions` (rule sources, the `Asker` its questions go to, the settings
writer), `store` (audit records), `untrusted_text`. Nothing of `runtime`, not even
for types: `runtime` and `commands` import `egress`.

Nothing is imported here: `warden exec` imports `flags` at start-up and must not
pay for the proxy unless egress is asked for.
"""
