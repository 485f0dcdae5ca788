"""Who may ask what on the status socket: every registered command (swap, mark, whatever is
added later) changes something, so only the daemon's own side may send it; `status` itself is
open to every local user or to that side only, as server.status_readers says.

    access = StatusAccess.ipc(readers="owner", group_gid=None)      # ipc:// bind
    access = StatusAccess.tcp(readers="any", token=b"...")          # tcp:// bind
    why = access.refusal("swap", mutating=True, peer="localhost:1000:1000:42", request=r, port=0)

"The daemon's own side" is, on ipc://, a peer whose kernel credentials (SO_PEERCRED, which
libzmq hands over as the message's Peer-Address, "...:uid:gid:pid") are the daemon's uid, root,
or a member of server.status_group; on tcp://, which carries no credentials, a request signed
with the status token (controller.observe.status_token, controller.observe.request_signature).
A tcp bind without a token (it could not be made) is read-only: every command is refused, with
the reason.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass, field
from typing import Any, Literal

from controller.observe.request_signature import SignatureChecker

Readers = Literal["any", "owner"]


@dataclass(frozen=True)
class PeerCredentials:
    uid: int
    gid: int
    pid: int


def peer_credentials(peer_address: str | None) -> PeerCredentials | None:
    """The uid, gid and pid in an ipc peer's Peer-Address ("localhost:uid:gid:pid"); None when
    it holds none (no SO_PEERCRED on this system, or not an ipc peer)."""
    if not peer_address:
        return None
    parts = peer_address.rsplit(":", 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
        return None
    return PeerCredentials(int(parts[1]), int(parts[2]), int(parts[3]))


@dataclass(frozen=True)
class StatusAccess:
    transport: Literal["ipc", "tcp"]
    readers: Readers
    group_gid: int | None = None  # ipc: this group's members command too
    signatures: SignatureChecker | None = field(default=None, compare=False)  # tcp: the token's
    token_problem: str = ""  # tcp without a token: why (said in each refusal)
    owner_uid: int = os.geteuid()

    @classmethod
    def ipc(cls, readers: Readers = "owner", group_gid: int | None = None) -> StatusAccess:
        return cls("ipc", readers, group_gid=group_gid, owner_uid=os.geteuid())

    @classmethod
    def tcp(
        cls, readers: Readers = "any", token: bytes | None = None, token_problem: str = ""
    ) -> StatusAccess:
        signatures = SignatureChecker(token) if token is not None else None
        return cls(
            "tcp", readers, signatures=signatures, token_problem=token_problem,
            owner_uid=os.geteuid(),
        )  # fmt: skip

    @property
    def socket_mode(self) -> int:
        """The ipc socket file's mode: connecting needs write permission on it, so others get
        it only when they may read the status (commands are still checked per peer)."""
        if self.readers == "any":
            return 0o666
        return 0o660 if self.group_gid is not None else 0o600

    def refusal(
        self, kind: str, *, mutating: bool, peer: str | None, request: dict[Any, Any], port: int
    ) -> str | None:
        """None when `request` (from `peer`, its Peer-Address, to the socket on `port`) may be
        answered, else one sentence saying why not."""
        if not mutating and self.readers == "any":
            return None
        what = f"the {kind} command" if mutating else "the status"
        if self.transport == "ipc":
            return self._ipc_refusal(what, peer)
        return self._tcp_refusal(what, request, port)

    def _ipc_refusal(self, what: str, peer: str | None) -> str | None:
        credentials = peer_credentials(peer)
        if credentials is None:
            return (
                f"the daemon cannot tell which user asked for {what} (this system's ipc sockets "
                "give no peer credentials), so it is refused"
            )
        if self._is_own_side(credentials):
            return None
        gid = self.group_gid
        group = "" if gid is None else f" or members of group {_group_name(gid)}"
        return (
            f"only the daemon's user (uid {self.owner_uid}), root{group} may ask for {what} on "
            f"this socket, not uid {credentials.uid}"
        )

    def _is_own_side(self, peer: PeerCredentials) -> bool:
        if peer.uid in (self.owner_uid, 0):
            return True
        if self.group_gid is None:
            return False
        if peer.gid == self.group_gid:
            return True
        try:  # a supplementary member, by the user database
            name = pwd.getpwuid(peer.uid).pw_name
            return name in grp.getgrgid(self.group_gid).gr_mem
        except KeyError:
            return False

    def _tcp_refusal(self, what: str, request: dict[Any, Any], port: int) -> str | None:
        if self.signatures is None:
            return (
                f"this status socket is read-only, so it refuses {what}: the daemon has no status "
                f"token ({self.token_problem or 'none configured'})"
            )
        wrong = self.signatures.refusal(request, port)
        if wrong is None:
            return None
        return (
            f"{what} needs a signature with the daemon's status token and this request "
            f"{wrong}; ask as the daemon's user, who can read the token file "
            "(server.status_token)"
        )


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
