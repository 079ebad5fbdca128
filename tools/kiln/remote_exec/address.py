"""`--remote_executor=ray://HOST:PORT`: the Ray Client address of the cluster's head."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ADDRESS = re.compile(r"ray://(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+):(?P<port>\d{1,5})/?")


@dataclass(frozen=True)
class RayAddress:
    host: str
    port: int

    @staticmethod
    def parse(text: str) -> RayAddress:
        """ValueError unless `text` is ray://HOST:PORT."""
        found = _ADDRESS.fullmatch(text.strip())
        if found is None or not 0 < int(found["port"]) < 65536:
            raise ValueError(f"not a Ray Client address (ray://HOST:PORT): {text!r}")
        return RayAddress(found["host"].strip("[]"), int(found["port"]))

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ray://{host}:{self.port}"
