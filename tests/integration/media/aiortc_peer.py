#!/usr/bin/env python3
"""An independent WebRTC peer (aiortc + websockets) that speaks calling-server's room protocol.

    python3 aiortc_peer.py --url ws://HOST:PORT/v1/ws --token T [--call PEER] [--tone HZ]
        [--send-data TEXT] [--seconds N] [--hangup] [--relay-only] [--answer-sessions]
        [--record out.wav] [--connect-timeout S]

It connects to /v1/ws?token=…, waits for `welcome`, fetches ICE servers from GET /v1/ice with the
same token, then either calls PEER (--call: waits until PEER is in the room, offers one sendrecv
Opus track and a data channel "chat") or answers the first `offer` it gets. aiortc gathers every
candidate before setLocalDescription returns, so the SDP it sends is complete and it trickles no
`candidate` frames; candidates trickled by the other side are applied (empty = end of candidates).
Offers from HTTP sessions (payload with `session_id`) are answered with that `session_id` echoed;
a new offer on the session it answers (the caller's renegotiation PATCH) is answered on the same
peer connection, another session's as a new connection (the caller's re-POST);
with --answer-sessions it also plays the agent's side of the `control` channel (docs/protocol.md,
"The control channel"): `status connected` when it opens, `pong` for `ping`, and on `hangup` it
ends the session (`data {kind:"hangup"}` to the session's peer id) and the call. When a session
is replaced (`data {kind:"replaced"}`) it says `status replaced` on the old connection's `control`
channel (if open) before closing it. --silent-after S stops sending audio (no RTP at all) S s after
connecting while still answering `ping`; --stall-after S also stops answering `ping` (a hung media
side) until the session is replaced.

It sends a sine of --tone Hz (silence without it) and measures what it receives. The call lasts
--seconds after the connection is up, or until the other side hangs up (`data {kind:"hangup"}`,
`peer-left`, or the peer connection closing). --hangup sends `data {kind:"hangup"}` at the end.
Progress lines are `<event> {json}`; the last line is always `summary {json}`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import traceback
import urllib.parse

from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.sdp import candidate_from_sdp
from websockets.asyncio.client import connect as ws_connect

from rtc_common import AudioSink, ToneTrack, emit, http_json, now_ms, rtc_configuration, rtp_stats, selected_pair


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="ws://HOST:PORT/v1/ws")
    parser.add_argument("--token", required=True)
    parser.add_argument("--call", metavar="PEER", help="call this peer id (otherwise answer incoming offers)")
    parser.add_argument("--tone", type=float, default=0.0, metavar="HZ", help="send a sine of HZ (default: silence)")
    parser.add_argument("--send-data", action="append", default=[], metavar="TEXT",
                        help="send TEXT on the data channel once it opens (repeatable)")
    parser.add_argument("--seconds", type=float, default=3.0, help="call length once connected")
    parser.add_argument("--hangup", action="store_true", help="send data {kind: hangup} at the end")
    parser.add_argument("--relay-only", action="store_true", help="ICE transport policy relay")
    parser.add_argument("--answer-sessions", action="store_true", help="agent side of the `control` channel")
    parser.add_argument("--record", metavar="WAV", help="write the received audio (mono 48 kHz) here")
    parser.add_argument("--silent-after", type=float, metavar="S",
                        help="S s after connecting, send no more audio (no RTP) but keep answering ping")
    parser.add_argument("--stall-after", type=float, metavar="S",
                        help="S s after connecting, send no audio and answer no ping until the session is replaced")
    parser.add_argument("--connect-timeout", type=float, default=20.0,
                        help="give up when not connected this long after start")
    return parser.parse_args(argv)


async def wait_any(events, timeout: float) -> bool:
    """Waits (bounded) until one of the asyncio.Events is set; False on timeout."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        done, _ = await asyncio.wait(waiters, timeout=max(0.01, timeout), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return bool(done)


class Call:
    def __init__(self, args):
        self.args = args
        self.ws = None
        self.peer_id: str | None = None
        self.remote: str | None = None
        self.session_id: str | None = None
        self.pc: RTCPeerConnection | None = None
        self.tone = ToneTrack(args.tone)
        self.sink = AudioSink(args.record)
        self.ice_servers: list = []
        self.started_ms = now_ms()
        self.negotiation_started_ms: float | None = None
        self.connect_ms: float | None = None
        self.connected = asyncio.Event()
        self.ended = asyncio.Event()
        self.hangup_reason: str | None = None
        self.data_sent: list[str] = []
        self.data_received: list[str] = []
        self.control_received: list = []
        self.control_sent: list = []
        self.errors: list = []
        self.pending_candidates: list[dict] = []
        self.peers: set[str] = set()
        self.peer_joined = asyncio.Event()
        self.pair = None
        self.control_channel = None  # the current connection's `control` channel
        self.stalled = False
        self.quiet_task = None

    # signaling -------------------------------------------------------------------------------

    async def send(self, frame: dict) -> None:
        await self.ws.send(json.dumps(frame))

    async def recv(self, timeout: float) -> dict:
        return json.loads(await asyncio.wait_for(self.ws.recv(), timeout))

    def end(self, reason: str) -> None:
        if self.hangup_reason is None:
            self.hangup_reason = reason
        self.ended.set()

    async def run(self) -> None:
        args = self.args
        self.ws = await asyncio.wait_for(
            ws_connect(f"{args.url}?{urllib.parse.urlencode({'token': args.token})}", proxy=None, compression=None,
                       open_timeout=10, close_timeout=2, max_size=16 * 1024 * 1024), 12)
        welcome = await self.recv(10)
        if welcome.get("type") != "welcome":
            raise RuntimeError(f"expected welcome, got {welcome}")
        self.peer_id = welcome["payload"]["peer_id"]
        self.peers = {p["peer_id"] for p in welcome["payload"].get("peers", [])}
        emit("welcome", peer_id=self.peer_id, peers=sorted(self.peers))
        base = urllib.parse.urlsplit(args.url)
        ice_url = urllib.parse.urlunsplit(("https" if base.scheme == "wss" else "http", base.netloc, "/v1/ice", "", ""))
        status, _, answer = await asyncio.to_thread(http_json, "GET", ice_url, None,
                                                    {"Authorization": f"Bearer {args.token}"}, 10)
        if status != 200:
            raise RuntimeError(f"GET /v1/ice answered {status}: {answer}")
        self.ice_servers = answer["ice_servers"]
        emit("ice", servers=[u for e in self.ice_servers for u in (e["urls"] if isinstance(e["urls"], list) else [e["urls"]])])

        reader = asyncio.ensure_future(self.read_frames())
        try:
            if args.call:
                await self.place_call(args.call)
            left = args.connect_timeout - (now_ms() - self.started_ms) / 1000
            if not await wait_any((self.connected, self.ended), left):
                self.end("connect-timeout")
            if not self.ended.is_set():
                try:
                    await asyncio.wait_for(self.ended.wait(), args.seconds)
                except asyncio.TimeoutError:
                    self.end("local-hangup" if args.hangup else "done")
            if args.hangup and self.remote and self.hangup_reason == "local-hangup":
                await self.send({"type": "data", "to": self.remote, "payload": {"kind": "hangup"}})
                emit("hangup", to=self.remote)
        finally:
            reader.cancel()

    async def read_frames(self) -> None:
        """Handles frames one at a time, in order (a candidate is never applied before its offer)."""
        try:
            async for message in self.ws:
                frame = json.loads(message)
                try:
                    await self.handle(frame)
                except Exception as error:  # noqa: BLE001 - recorded in the summary
                    self.errors.append(f"{frame.get('type')}: {error!r}")
                    emit("error", frame=frame.get("type"), error=repr(error))
        except Exception as error:  # noqa: BLE001
            self.errors.append(f"websocket: {error!r}")
        self.end("signaling-closed")

    async def handle(self, frame: dict) -> None:
        kind, sender, payload = frame.get("type"), frame.get("from"), frame.get("payload") or {}
        if kind == "peer-joined":
            self.peers.add(payload.get("peer_id"))
            self.peer_joined.set()
        elif kind == "peer-left":
            self.peers.discard(payload.get("peer_id"))
            if payload.get("peer_id") == self.remote:
                self.end("peer-left")
        elif kind == "offer":
            await self.answer_offer(sender, payload)
        elif kind == "answer":
            if sender == self.remote and self.pc is not None:
                await self.pc.setRemoteDescription(RTCSessionDescription(sdp=payload["sdp"], type="answer"))
                emit("answer-applied", peer=sender)
                await self.flush_candidates()
        elif kind == "candidate":
            self.pending_candidates.append(payload)
            if self.pc is not None and self.pc.remoteDescription is not None and sender == self.remote:
                await self.flush_candidates()
        elif kind == "data":
            what = payload.get("kind") if isinstance(payload, dict) else None
            if sender == self.remote and what == "hangup":
                self.end("remote-hangup")
            elif sender == self.remote and what == "replaced":
                emit("replaced", session_id=payload.get("session_id"))
                channel, self.control_channel = self.control_channel, None
                if self.args.answer_sessions and channel is not None and channel.readyState == "open":
                    self.send_control(channel, {"type": "status", "state": "replaced"})
                    emit("status-replaced-sent", session_id=payload.get("session_id"))
                    await asyncio.sleep(0.2)  # on the wire before SCTP goes away
                if self.stalled:
                    self.stalled = False
                    self.tone.paused = False
                await self.close_pc()
                self.connected.clear()
        elif kind == "error":
            self.errors.append(frame.get("error"))
            emit("server-error", error=frame.get("error"), payload=payload)

    async def flush_candidates(self) -> None:
        while self.pending_candidates:
            payload = self.pending_candidates.pop(0)
            text = payload.get("candidate") or ""
            if not text:
                await self.pc.addIceCandidate(None)
                continue
            candidate = candidate_from_sdp(text.split(":", 1)[1] if text.startswith("candidate:") else text)
            candidate.sdpMid = payload.get("sdpMid")
            candidate.sdpMLineIndex = payload.get("sdpMLineIndex")
            if candidate.sdpMid is None and candidate.sdpMLineIndex is None:
                candidate.sdpMLineIndex = 0
            await self.pc.addIceCandidate(candidate)

    # media -----------------------------------------------------------------------------------

    def new_pc(self) -> RTCPeerConnection:
        pc = RTCPeerConnection(rtc_configuration(self.ice_servers, self.args.relay_only))

        @pc.on("connectionstatechange")
        async def on_state():
            emit("connection-state", state=pc.connectionState)
            if pc is not self.pc:
                return
            if pc.connectionState == "connected" and not self.connected.is_set():
                self.connect_ms = round(now_ms() - self.negotiation_started_ms, 1)
                self.pair = selected_pair(pc)
                emit("connected", connect_ms=self.connect_ms, pair=self.pair)
                self.connected.set()
                if self.quiet_task is None and (self.args.silent_after is not None or self.args.stall_after is not None):
                    self.quiet_task = asyncio.ensure_future(self.go_quiet())
            elif pc.connectionState in ("failed", "closed") and self.connected.is_set():
                self.end(f"connection-{pc.connectionState}")

        @pc.on("track")
        def on_track(track):
            if track.kind == "audio":
                self.sink.start(track)

        @pc.on("datachannel")
        def on_datachannel(channel):
            self.wire_channel(channel)

        return pc

    async def go_quiet(self) -> None:
        stall = self.args.stall_after is not None
        await asyncio.sleep(self.args.stall_after if stall else self.args.silent_after)
        self.tone.paused = True
        self.stalled = stall
        emit("stalled" if stall else "silent", frames_sent=self.tone.frames_sent)

    def wire_channel(self, channel) -> None:
        control = channel.label == "control"
        if control:
            self.control_channel = channel

        def opened():
            emit("channel-open", label=channel.label)
            if control and self.args.answer_sessions:
                self.send_control(channel, {"type": "status", "state": "connected"})
            elif not control:
                for text in self.args.send_data:
                    channel.send(text)
                    self.data_sent.append(text)

        @channel.on("message")
        def on_message(message):
            text = message if isinstance(message, str) else message.decode(errors="replace")
            if not control:
                self.data_received.append(text)
                emit("data", label=channel.label, text=text)
                return
            try:
                msg = json.loads(text)
            except ValueError:
                msg = text
            self.control_received.append(msg)
            emit("control", message=msg)
            if not self.args.answer_sessions or not isinstance(msg, dict):
                return
            if msg.get("type") == "ping":
                if not self.stalled:
                    self.send_control(channel, {"type": "pong", "ts": msg.get("ts")})
            elif msg.get("type") == "hangup":
                asyncio.ensure_future(self.end_session("control-hangup"))

        if channel.readyState == "open":
            opened()
        else:
            channel.on("open", opened)

    async def end_session(self, reason: str) -> None:
        """The agent ends an HTTP session: `data {kind:"hangup"}` to the session's peer id, so the
        server ends it too (docs/protocol.md, HTTP sessions)."""
        try:
            if self.remote is not None:
                await self.send({"type": "data", "to": self.remote, "payload": {"kind": "hangup"}})
        finally:
            self.end(reason)

    def send_control(self, channel, message: dict) -> None:
        channel.send(json.dumps(message))
        self.control_sent.append(message)

    async def close_pc(self) -> None:
        if self.pc is not None:
            pc, self.pc = self.pc, None
            await asyncio.wait_for(pc.close(), 5)

    async def place_call(self, callee: str) -> None:
        deadline = time.monotonic() + self.args.connect_timeout
        while callee not in self.peers:
            self.peer_joined.clear()
            if not await wait_any((self.peer_joined, self.ended), deadline - time.monotonic()):
                raise RuntimeError(f"{callee} did not join the room within {self.args.connect_timeout}s")
            if self.ended.is_set():
                return
        self.remote = callee
        self.pc = self.new_pc()
        self.pc.addTrack(self.tone)
        self.wire_channel(self.pc.createDataChannel("chat"))
        self.negotiation_started_ms = now_ms()
        await self.pc.setLocalDescription(await self.pc.createOffer())
        await self.send({"type": "offer", "to": callee,
                         "payload": {"sdp": self.pc.localDescription.sdp, "type": "offer"}})
        emit("offer-sent", to=callee, gather_ms=round(now_ms() - self.negotiation_started_ms, 1))

    async def answer_offer(self, sender: str, payload: dict) -> None:
        # A renegotiation: a room peer's new offer, or an HTTP session's caller sending a new offer
        # on the same session (PATCH application/sdp, e.g. its ICE restart after a media drop).
        renegotiation = self.pc is not None and sender == self.remote and (
            "session_id" not in payload or payload.get("session_id") == self.session_id)
        if self.pc is not None and not renegotiation:
            if sender != self.remote:
                emit("offer-ignored", peer=sender)
                return
            await self.close_pc()  # a new HTTP session from the same peer replaces the old one
            self.connected.clear()
        self.remote = sender
        self.session_id = payload.get("session_id", self.session_id)
        if not renegotiation:
            self.negotiation_started_ms = now_ms()
            self.pc = self.new_pc()
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=payload["sdp"], type="offer"))
        if not renegotiation:
            if self.tone.readyState != "live":
                # aiortc stops a sender's track when its connection closes (a replaced session).
                sent, self.tone = self.tone.frames_sent, ToneTrack(self.args.tone)
                self.tone.frames_sent = sent
            self.pc.addTrack(self.tone)  # takes the offer's audio transceiver: sendrecv
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        answer = {"sdp": self.pc.localDescription.sdp, "type": "answer"}
        if self.session_id is not None and "session_id" in payload:
            answer["session_id"] = self.session_id
        await self.send({"type": "answer", "to": sender, "payload": answer})
        emit("answer-sent", to=sender, session_id=answer.get("session_id"), transport=payload.get("transport"),
             renegotiation=renegotiation)
        await self.flush_candidates()

    async def finish(self) -> dict:
        stats = await rtp_stats(self.pc) if self.pc is not None else {"packets_sent": None, "packets_received": None}
        self.sink.stop()
        await self.close_pc()
        if self.ws is not None:
            try:
                await asyncio.wait_for(self.ws.close(), 3)
            except Exception:  # noqa: BLE001
                pass
        return {
            "peer_id": self.peer_id, "remote": self.remote, "session_id": self.session_id,
            "connected": self.connect_ms is not None, "connect_ms": self.connect_ms,
            "selected_pair": self.pair, "tone_hz": self.args.tone, "frames_sent": self.tone.frames_sent,
            **stats, **self.sink.report(),
            "data_sent": self.data_sent, "data_received": self.data_received,
            "control_sent": self.control_sent, "control_received": self.control_received,
            "hangup_reason": self.hangup_reason, "errors": self.errors,
        }


async def main(args) -> int:
    call = Call(args)
    try:
        await asyncio.wait_for(call.run(), args.connect_timeout + args.seconds + 10)
    except Exception as error:  # noqa: BLE001 - the summary says what went wrong
        traceback.print_exc(file=sys.stdout)
        call.errors.append(f"run: {error!r}")
        call.end("error")
    try:
        summary = await asyncio.wait_for(call.finish(), 10)
    except Exception as error:  # noqa: BLE001
        summary = {"connected": call.connect_ms is not None, "errors": [*call.errors, f"finish: {error!r}"]}
    emit("summary", **summary)
    return 0 if summary.get("connected") else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
