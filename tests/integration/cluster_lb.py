"""A "load balancer" in front of a cluster's nodes, for tests: every HTTP request and every
WebSocket connection goes to a node picked at random (docs/operations.md, "Running a cluster").

The pick is random among the nodes other than the one the previous pick took, so two requests in a
row never reach the same node: a state kept per node (a call, a key, a ban, a session) then fails
the very next request instead of passing by luck. Each answer says which node gave it, for the
assertion messages; `picks` counts the picks per node port.
"""

from __future__ import annotations

import http.client
import json
import random
from collections import Counter

from support import Peer


class Answer:
    """One HTTP answer: status, headers (lower-case names), body bytes, its JSON when it is
    JSON, and the port of the node that gave it."""

    def __init__(self, status: int, headers: dict, raw: bytes, node: int):
        self.status = status
        self.headers = headers
        self.raw = raw
        self.node = node
        try:
            self.json = json.loads(raw) if raw else None
        except ValueError:
            self.json = None

    @property
    def text(self) -> str:
        return self.raw.decode(errors="replace")

    def __repr__(self) -> str:
        return f"<{self.status} from node :{self.node} {self.raw[:300]!r}>"


class LoadBalancer:
    def __init__(self, nodes: list, seed: int | None = None):
        assert len(nodes) >= 2, "a balancer needs two nodes to alternate"
        self.nodes = list(nodes)
        self.random = random.Random(seed)
        self.last = None
        self.picks: Counter = Counter()

    def pick(self):
        node = self.random.choice([node for node in self.nodes if node is not self.last])
        self.last = node
        self.picks[node.port] += 1
        return node

    def request(self, method: str, path: str, *, key: str | None = None, token: str | None = None,
                body=None, headers: dict | None = None, timeout: float = 10.0, node=None) -> Answer:
        """One request to a random node (or to `node`): JSON for a dict/list `body`, bytes or
        text as is (set the content type in `headers`)."""
        node = node or self.pick()
        sent = dict(headers or {})
        if key is not None:
            sent["X-API-Key"] = key
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            sent.setdefault("Content-Type", "application/json")
        conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            raw = response.read()
            return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, raw, node.port)
        finally:
            conn.close()

    async def connect(self, token: str, label: str, **kwargs) -> Peer:
        """A WebSocket peer on a random node; `peer.node` is that node."""
        node = self.pick()
        peer = await Peer.connect(node, token, f"{label}@:{node.port}", **kwargs)
        peer.node = node
        return peer
