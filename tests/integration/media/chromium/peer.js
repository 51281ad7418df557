// A browser peer for calling-server's room protocol (docs/protocol.md), driven by chromium_peer.py.
//
// runCall(config) joins the room of config.token over config.url (ws://HOST:PORT/v1/ws), then either
// calls config.call (waits until it is in the room; getUserMedia audio, RTCPeerConnection, data
// channel "chat", offer) or answers the first offer it gets. Candidates trickle both ways (a null
// local candidate is sent as the empty end-of-candidates one). When a data channel named "chat"
// opens, config.sendData is sent on it. config.seconds after the connection is up (or when the
// other side hangs up) it reads getStats(), sends `data {kind:"hangup"}` unless the other side
// ended the call, closes everything and resolves with a plain JSON report. Never rejects: failures
// are in report.errors and report.hangup_reason.
//
// Chromium has once (one CI run in many, as the callee, the channel opened by the Linux peer)
// returned from send() on an open channel and then counted messagesSent 0 for the whole call: the
// message never reached SCTP, and the far end got nothing. So a second after
// sending, the page reads its own stats, and only on that evidence sends once more and says so in
// report.resent; whether the far end received it is still what the test checks.
"use strict";

function runCall(config) {
  const report = {
    role: config.call ? "caller" : "callee", peer_id: null, remote: null, connected: false, connect_ms: null,
    connection_states: [], ice_states: [], data_sent: [], data_received: [], channels: [], resent: [],
    candidates_sent: 0, candidates_received: 0, hangup_reason: null, errors: [], stats: null,
  };
  const log = (...parts) => console.log("[peer]", ...parts);
  const now = () => performance.now();
  let ws = null, pc = null, stream = null, negotiationStart = null, ended = false, hungUp = false;
  let pendingCandidates = [];
  let resolveConnected, resolveEnded;
  const connectedP = new Promise((r) => { resolveConnected = r; });
  const endedP = new Promise((r) => { resolveEnded = r; });
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  function end(reason) {
    if (report.hangup_reason === null) report.hangup_reason = reason;
    if (!ended) { ended = true; log("end", reason); resolveEnded(); }
  }
  function send(frame) {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(frame));
  }

  function wireChannel(channel) {
    report.channels.push(channel.label);
    const opened = () => {
      log("channel open", channel.label);
      if (channel.label === "chat" && config.sendData) {
        channel.send(config.sendData);
        report.data_sent.push(config.sendData);
        setTimeout(() => resendIfDropped(channel).catch((error) => report.errors.push("resend: " + error)), 1000);
      }
    };
    channel.onmessage = (event) => {
      const text = typeof event.data === "string" ? event.data : "<binary>";
      log("data", channel.label, text);
      report.data_received.push({ label: channel.label, text });
    };
    if (channel.readyState === "open") opened(); else channel.onopen = opened;
  }

  async function resendIfDropped(channel) {
    if (ended || !pc || channel.readyState !== "open") return;
    let sent = null;
    (await pc.getStats()).forEach((s) => {
      if (s.type === "data-channel" && s.label === channel.label) sent = s.messagesSent;
    });
    // Not bufferedAmount: Chromium still counts a delivered message in it a second later.
    if (sent === 0) {
      log("resend", channel.label, "messagesSent is 0 a second after send(); bufferedAmount", channel.bufferedAmount);
      report.resent.push({ text: config.sendData, buffered_amount: channel.bufferedAmount });
      channel.send(config.sendData);
    }
  }

  async function newPeerConnection() {
    // getUserMedia first: with the permission granted Chromium exposes real host candidates.
    stream = await navigator.mediaDevices.getUserMedia({ audio: true, video: false });
    pc = new RTCPeerConnection({ iceServers: [] });  // the lab needs no STUN: host candidates only
    pc.onicecandidate = (event) => {
      const c = event.candidate;
      send({ type: "candidate", to: report.remote, payload: c
        ? { candidate: c.candidate, sdpMid: c.sdpMid, sdpMLineIndex: c.sdpMLineIndex }
        : { candidate: "", sdpMid: null, sdpMLineIndex: null } });
      if (c) report.candidates_sent += 1;
    };
    pc.oniceconnectionstatechange = () => report.ice_states.push(pc.iceConnectionState);
    pc.onconnectionstatechange = () => {
      const state = pc.connectionState;
      report.connection_states.push(state);
      log("connection", state);
      if (state === "connected" && !report.connected) {
        report.connected = true;
        report.connect_ms = Math.round((now() - negotiationStart) * 10) / 10;
        resolveConnected();
      } else if ((state === "failed" || state === "closed") && !ended) {
        end("connection-" + state);
      }
    };
    // Played out (into nothing: --mute-audio, and headless has no sound card) so that Chromium's
    // audio pipeline pulls the received stream and computes inbound-rtp audioLevel/totalAudioEnergy.
    pc.ontrack = (event) => {
      const audio = document.getElementById("remote");
      if (audio.srcObject) { audio.srcObject.addTrack(event.track); return; }
      audio.srcObject = new MediaStream([event.track]);
      audio.play().catch((error) => report.errors.push("play: " + error));
    };
    pc.ondatachannel = (event) => wireChannel(event.channel);
  }

  async function flushCandidates() {
    while (pc && pc.remoteDescription && pendingCandidates.length) {
      const p = pendingCandidates.shift();
      if (!p.candidate) continue;  // end of candidates
      await pc.addIceCandidate({ candidate: p.candidate, sdpMid: p.sdpMid ?? null,
        sdpMLineIndex: p.sdpMLineIndex ?? (p.sdpMid == null ? 0 : null) });
    }
  }

  async function placeCall(callee) {
    if (pc) return;
    report.remote = callee;
    negotiationStart = now();
    await newPeerConnection();
    for (const track of stream.getAudioTracks()) pc.addTrack(track, stream);
    wireChannel(pc.createDataChannel("chat"));
    await pc.setLocalDescription(await pc.createOffer());
    send({ type: "offer", to: callee, payload: { sdp: pc.localDescription.sdp, type: "offer" } });
    log("offer sent to", callee);
  }

  async function answerOffer(sender, payload) {
    if (pc) { log("offer ignored from", sender); return; }
    report.remote = sender;
    negotiationStart = now();
    await newPeerConnection();
    await pc.setRemoteDescription({ type: "offer", sdp: payload.sdp });
    // addTrack takes the offer's audio transceiver and makes it sendrecv.
    for (const track of stream.getAudioTracks()) pc.addTrack(track, stream);
    await pc.setLocalDescription(await pc.createAnswer());
    send({ type: "answer", to: sender, payload: { sdp: pc.localDescription.sdp, type: "answer" } });
    log("answer sent to", sender);
    await flushCandidates();
  }

  async function handle(frame) {
    const payload = frame.payload || {};
    switch (frame.type) {
      case "welcome": {
        report.peer_id = payload.peer_id;
        const peers = (payload.peers || []).map((p) => p.peer_id);
        log("welcome", report.peer_id, JSON.stringify(peers));
        if (config.call && peers.includes(config.call)) await placeCall(config.call);
        break;
      }
      case "peer-joined":
        if (config.call && payload.peer_id === config.call) await placeCall(config.call);
        break;
      case "peer-left":
        if (payload.peer_id === report.remote) end("peer-left");
        break;
      case "offer":
        await answerOffer(frame.from, payload);
        break;
      case "answer":
        if (pc && frame.from === report.remote) {
          await pc.setRemoteDescription({ type: "answer", sdp: payload.sdp });
          log("answer applied");
          await flushCandidates();
        }
        break;
      case "candidate":
        if (frame.from !== report.remote && report.remote !== null) break;
        report.candidates_received += 1;
        pendingCandidates.push(payload);
        await flushCandidates();
        break;
      case "data":
        if (frame.from === report.remote && payload.kind === "hangup") end("remote");
        break;
      case "error":
        report.errors.push("server: " + JSON.stringify(frame.error));
        break;
    }
  }

  async function readStats() {
    const stats = { inbound_audio: null, outbound_audio: null, pair: null, codec: null, data_channels: [] };
    const all = await pc.getStats();
    let pairId = null;
    all.forEach((s) => {
      if (s.type === "transport" && s.selectedCandidatePairId) pairId = s.selectedCandidatePairId;
    });
    all.forEach((s) => {
      if (s.type === "inbound-rtp" && s.kind === "audio") {
        stats.inbound_audio = {
          packetsReceived: s.packetsReceived, packetsLost: s.packetsLost, bytesReceived: s.bytesReceived,
          jitter: s.jitter, audioLevel: s.audioLevel, totalAudioEnergy: s.totalAudioEnergy,
          totalSamplesDuration: s.totalSamplesDuration, totalSamplesReceived: s.totalSamplesReceived,
          concealedSamples: s.concealedSamples,
        };
        const codec = s.codecId && all.get(s.codecId);
        if (codec) stats.codec = { mimeType: codec.mimeType, payloadType: codec.payloadType };
      } else if (s.type === "outbound-rtp" && s.kind === "audio") {
        stats.outbound_audio = { packetsSent: s.packetsSent, bytesSent: s.bytesSent };
      } else if (s.type === "data-channel") {
        stats.data_channels.push({ label: s.label, state: s.state, messagesSent: s.messagesSent,
          messagesReceived: s.messagesReceived });
      }
    });
    const pair = pairId && all.get(pairId);
    if (pair) {
      const local = all.get(pair.localCandidateId), remote = all.get(pair.remoteCandidateId);
      stats.pair = { state: pair.state, rtt: pair.currentRoundTripTime,
        local: local && { type: local.candidateType, address: local.address, port: local.port, protocol: local.protocol },
        remote: remote && { type: remote.candidateType, address: remote.address, port: remote.port, protocol: remote.protocol } };
    }
    return stats;
  }

  async function run() {
    const url = config.url + "?token=" + encodeURIComponent(config.token);
    ws = new WebSocket(url);
    let chain = Promise.resolve();  // frames are handled one at a time, in order
    ws.onmessage = (event) => {
      let frame;
      try { frame = JSON.parse(event.data); } catch (error) { report.errors.push("bad frame"); return; }
      chain = chain.then(() => handle(frame)).catch((error) => {
        report.errors.push(frame.type + ": " + error);
        log("error handling", frame.type, String(error));
      });
    };
    ws.onclose = (event) => { log("websocket closed", event.code); end("signaling-closed"); };
    ws.onerror = () => report.errors.push("websocket error");

    const connectTimeout = sleep(config.connectTimeout * 1000).then(() => "timeout");
    if ((await Promise.race([connectedP.then(() => "ok"), endedP.then(() => "ended"), connectTimeout])) === "timeout") {
      end("connect-timeout");
    }
    if (!ended) {
      await Promise.race([endedP, sleep(config.seconds * 1000)]);
    }
    if (pc) {
      try { report.stats = await readStats(); } catch (error) { report.errors.push("getStats: " + error); }
    }
    if (!ended) {
      end("local-hangup");
    }
    if (report.hangup_reason === "local-hangup" && report.remote) {
      send({ type: "data", to: report.remote, payload: { kind: "hangup" } });
      hungUp = true;
    }
    report.sent_hangup = hungUp;
    if (pc) pc.close();
    if (stream) stream.getTracks().forEach((t) => t.stop());
    await sleep(100);  // let the hangup frame leave before the socket closes
    if (ws) ws.close();
    return report;
  }

  return run().catch((error) => {
    report.errors.push("run: " + error);
    return report;
  });
}
