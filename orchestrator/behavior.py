"""What a decision on a call says, in the words every floor uses: the policy's answer
(`Behavior`: allow, deny or ask a person) and how a call ends once any question is
answered (`FinalBehavior`: allow or deny). The permission engine, the approvers,
egress and the audit store all name these.

A foundation. May import: `errors`.
"""

from __future__ import annotations

from typing import Literal

Behavior = Literal["allow", "deny", "ask"]
"""What rules, hooks and modes decide for a call."""
FinalBehavior = Literal["allow", "deny"]
"""What happens to the call in the end (an `ask` answered, or refused unasked)."""
