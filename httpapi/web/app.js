// The dsh serve page: the sessions list, a live transcript streamed from
// the SSE route with fetch (so the bearer token rides in a header), and a
// box to send a followup or steer. Plain DOM, no build step, no network
// access but this server. Text from the log is set with textContent only.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { token: sessionStorage.getItem("dsh-token") || "", current: "", gen: 0, abort: null };

function headers(extra) {
  const h = Object.assign({ "Content-Type": "application/json" }, extra || {});
  if (state.token) h["Authorization"] = "Bearer " + state.token;
  return h;
}

// api calls a /v1 route; a 401 asks for the token once and retries.
async function api(method, path, body) {
  for (;;) {
    const res = await fetch(path, { method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body) });
    if (res.status === 401) {
      await askToken();
      continue;
    }
    const data = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error((data.error && data.error.message) || res.statusText);
    return data;
  }
}

let asking = null;
function askToken() {
  if (!asking) {
    asking = new Promise((resolve) => {
      const d = $("login");
      $("login-form").onsubmit = () => {
        state.token = $("token").value.trim();
        sessionStorage.setItem("dsh-token", state.token);
        asking = null;
        resolve();
      };
      d.showModal();
    });
  }
  return asking;
}

// --- the sessions list ---

async function refreshList() {
  try {
    const data = await api("GET", "/v1/sessions?limit=500");
    const ul = $("sessions");
    ul.replaceChildren();
    for (const s of data.sessions) {
      const li = document.createElement("li");
      li.dataset.id = s.id;
      if (s.id === state.current) {
        li.className = "current";
        setStatus(s.status);
      }
      const t = document.createElement("span");
      t.className = "t";
      t.textContent = s.title || s.id;
      const m = document.createElement("span");
      m.className = "m";
      m.textContent = s.status + " · " + s.turns + " turn" + (s.turns === 1 ? "" : "s");
      li.append(t, m);
      li.onclick = () => select(s.id);
      ul.append(li);
    }
    $("conn").textContent = "";
  } catch (e) {
    $("conn").textContent = "server unreachable: " + e.message;
  }
}

function setStatus(s) {
  const b = $("status");
  b.textContent = s;
  b.className = "badge " + s;
}

// --- the transcript ---

// view renders a session's events as they arrive.
class View {
  constructor(root) {
    this.root = root;
    this.blocks = new Map(); // "turn/step/index" -> element
    this.steps = new Map(); // "turn/step" -> assistant element
  }
  add(cls, text) {
    const d = document.createElement("div");
    d.className = "msg " + cls;
    if (text !== undefined) d.textContent = text;
    const stick = this.root.scrollTop + this.root.clientHeight >= this.root.scrollHeight - 30;
    this.root.append(d);
    if (stick) this.root.scrollTop = this.root.scrollHeight;
    return d;
  }
  step(turn, step) {
    const k = turn + "/" + step;
    let el = this.steps.get(k);
    if (!el) {
      el = this.add("assistant");
      this.steps.set(k, el);
    }
    return el;
  }
  block(turn, step, index, kind) {
    const k = turn + "/" + step + "/" + index;
    let el = this.blocks.get(k);
    if (!el) {
      el = document.createElement("div");
      el.className = kind === "reasoning" ? "reasoning" : "text";
      this.step(turn, step).append(el);
      this.blocks.set(k, el);
    }
    return el;
  }
  event(type, ev) {
    const d = ev.data || {};
    switch (type) {
      case "user/message":
        if (d.source && d.source.kind === "user") this.add("user", textOf(d.content));
        break;
      case "assistant/chunk": {
        const c = d.chunk || {};
        if (c.type === "block-start") this.block(d.turn, d.step, c.index, c.blockType);
        else if (c.type === "text-delta") this.block(d.turn, d.step, c.index, "text").textContent += c.text;
        else if (c.type === "reasoning-delta") this.block(d.turn, d.step, c.index, "reasoning").textContent += c.text;
        break;
      }
      case "assistant/message": {
        // A step whose chunks were not logged shows the message itself.
        const el = this.step(d.turn, d.step);
        if (!el.textContent && d.message) {
          (d.message.content || []).forEach((b, i) => {
            if (b.type === "text" || b.type === "reasoning") this.block(d.turn, d.step, i, b.type).textContent = b.text;
          });
        }
        if (!el.textContent) el.remove();
        break;
      }
      case "tool/call":
        this.add("tool", "→ " + d.name + " " + (d.arguments || ""));
        break;
      case "tool/result":
        this.add("tool-result", textOf((d.message && d.message.content) || []));
        break;
      case "turn/end": {
        const r = d.reason || {};
        let why = r.kind;
        if (r.reason && r.reason.kind) why += " (" + r.reason.kind + ")";
        if (r.error && r.error.code) why += " (" + r.error.code + ")";
        const el = this.add("turn-end" + (r.kind === "completed" ? "" : " bad"), "turn " + d.turn + " ended: " + why);
        el.dataset.turn = d.turn;
        el.dataset.kind = r.kind;
        break;
      }
    }
  }
}

function textOf(content) {
  const out = [];
  for (const b of content || []) {
    if (b.type === "text") out.push(b.text);
    else if (b.type === "tool-result") out.push(textOf(b.content));
  }
  return out.join("\n");
}

// stream reads the session's events with fetch, resuming after the last
// seq it saw whenever the connection drops.
async function stream(id, gen) {
  const view = new View($("transcript"));
  let last = -1;
  while (state.gen === gen) {
    const ctl = new AbortController();
    state.abort = ctl;
    try {
      const res = await fetch("/v1/sessions/" + encodeURIComponent(id) + "/events", {
        headers: headers({ "Last-Event-ID": String(last) }),
        signal: ctl.signal,
      });
      if (res.status === 401) {
        await askToken();
        continue;
      }
      if (!res.ok) throw new Error("stream: " + res.status);
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let seq = null, type = "", data = [];
          for (const line of block.split("\n")) {
            if (line.startsWith("id: ")) seq = Number(line.slice(4));
            else if (line.startsWith("event: ")) type = line.slice(7);
            else if (line.startsWith("data: ")) data.push(line.slice(6));
          }
          if (seq === null || state.gen !== gen) continue;
          last = seq;
          view.event(type, JSON.parse(data.join("\n")));
        }
      }
    } catch (e) {
      if (state.gen !== gen) return;
    }
    if (state.gen === gen) await new Promise((r) => setTimeout(r, 1000));
  }
}

function select(id) {
  if (state.abort) state.abort.abort();
  state.gen++;
  state.current = id;
  location.hash = encodeURIComponent(id);
  $("empty").hidden = true;
  $("session").hidden = false;
  $("sid").textContent = id;
  $("transcript").replaceChildren();
  $("error").textContent = "";
  for (const li of $("sessions").children) li.className = li.dataset.id === id ? "current" : "";
  stream(id, state.gen);
  refreshList();
}

// --- actions ---

$("new").onclick = async () => {
  try {
    const s = await api("POST", "/v1/sessions", {});
    await refreshList();
    select(s.id);
  } catch (e) {
    $("conn").textContent = e.message;
  }
};

$("compose").onsubmit = async (ev) => {
  ev.preventDefault();
  const text = $("text").value;
  if (!text.trim() || !state.current) return;
  $("error").textContent = "";
  try {
    await api("POST", "/v1/sessions/" + encodeURIComponent(state.current) + "/messages", { text, mode: $("mode").value });
    $("text").value = "";
    refreshList();
  } catch (e) {
    $("error").textContent = e.message;
  }
};

$("text").onkeydown = (ev) => {
  if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) $("compose").requestSubmit();
};

$("cancel").onclick = async () => {
  if (!state.current) return;
  try {
    await api("POST", "/v1/sessions/" + encodeURIComponent(state.current) + "/cancel");
  } catch (e) {
    $("error").textContent = e.message;
  }
};

refreshList();
setInterval(refreshList, 1500);
if (location.hash.length > 1) select(decodeURIComponent(location.hash.slice(1)));
