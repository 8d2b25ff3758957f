"""The broker: the one channel between a subagent container and the host.

`server` serves one subagent's socket (`bodies`: how a request body is read;
`host`: what it needs from the run, `BrokerHost`) and `upstream` talks to the model API (through
`client`, which imports the SDK in the background); `forwarding` decides what reaches
the model API (`forwarding_policy`: how the rules decide each part; `provider_egress`:
where the provider may go for it), `budget` what
it may cost (`documents` and `image_tokens`: what its PDFs and images cost), `limits`
how much a container may make the host write, `listener` who may connect and for how
long, and `calls` which finished calls the host may act on.

May import: `errors`, `jsontypes`, `behavior` (what a permission answer says),
`permissions` (the rules forwarding follows), `documents` (what a PDF costs).
"""

from orchestrator.broker.bodies import RequestRejected
from orchestrator.broker.budget import Budget
from orchestrator.broker.calls import ApprovedCall
from orchestrator.broker.client import PendingClient, Upstream
from orchestrator.broker.forwarding_policy import ForwardDecision, ForwardingPolicy
from orchestrator.broker.host import BrokerHost
from orchestrator.broker.listener import (
    SandboxIdentity,
    groups_for,
    holds_group,
    make_socket_dir,
)
from orchestrator.broker.server import SOCKET_NAME, Broker

__all__ = [
    "SOCKET_NAME",
    "ApprovedCall",
    "Broker",
    "BrokerHost",
    "Budget",
    "ForwardDecision",
    "ForwardingPolicy",
    "PendingClient",
    "RequestRejected",
    "SandboxIdentity",
    "Upstream",
    "groups_for",
    "holds_group",
    "make_socket_dir",
]
