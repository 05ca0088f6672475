// The broker connection (mqtt.js over WebSockets) and the command channel of one table.
/* global mqtt */

let counter = 0;

export class Link {
  // onState(state, detail): "connecting" | "connected" | "disconnected" | "refused"
  constructor(url, username, password, onState) {
    this.url = url;
    this.username = username;
    this.password = password;
    this.onState = onState;
    this.handlers = new Map(); // topic -> [handler(payloadObject, topic)]
    this.connectHooks = [];
    this.connected = false;
    this.state = "connecting";
    // A message that cannot be shown (not JSON, or a handler that throws on its shape) is
    // skipped and reported here: onBadMessage(topic, reason), and onBadMessage(null) once
    // every topic that had one has shown a good message again. A throw must never reach
    // mqtt.js: it would leave the packet unfinished, and the page would read nothing more
    // until the keepalive dropped the connection, looking live all the while.
    this.onBadMessage = () => {};
    this.badTopics = new Map(); // topic -> reason
  }

  connect() {
    const id = `console-${this.username || "anon"}-${Math.random().toString(16).slice(2, 10)}`;
    this.client = mqtt.connect(this.url, {
      username: this.username || undefined, password: this.password || undefined,
      // keepalive 5 s: a connection lost without a word (a cable, a Wi-Fi drop) shows in
      // ~8 s, not ~22 s (outside review of issue 18); a ping every 5 s costs nothing here
      clientId: id, protocolVersion: 4, clean: true, keepalive: 5,
      reconnectPeriod: 1000, connectTimeout: 5000, resubscribe: false,
    });
    this._set("connecting");
    this.client.on("connect", () => {
      this.connected = true;
      const topics = [...this.handlers.keys()];
      if (topics.length) this.client.subscribe(topics, { qos: 1 });
      this._set("connected");
      for (const hook of this.connectHooks) hook();
    });
    this.client.on("reconnect", () => this._set("connecting"));
    const down = () => {
      if (this.connected || this.state === "connecting") {
        this.connected = false;
        if (this.state !== "refused") this._set("disconnected");
      }
    };
    this.client.on("close", down);
    this.client.on("offline", down);
    this.client.on("error", (err) => {
      // CONNACK 4 (bad user name or password) and 5 (not authorised): stop retrying.
      if (err && (err.code === 4 || err.code === 5 || err.code === 134 || err.code === 135)) {
        this._set("refused", err.message);
        this.client.end(true);
      }
    });
    this.client.on("message", (topic, payload, packet) => this._deliver(topic, payload, packet));
  }

  _deliver(topic, payload, packet) {
    const list = this.handlers.get(topic);
    if (!list) return;
    let data = null;
    if (payload && payload.length) {
      try {
        data = JSON.parse(new TextDecoder().decode(payload));
      } catch (err) {
        this._bad(topic, "not JSON");
        return;
      }
    }
    let failed = null;
    for (const fn of list) {
      try {
        fn(data, topic, packet);
      } catch (err) {
        failed = failed || (err && err.message) || String(err);
        console.error(`shoed console: a message on ${topic} could not be shown`, err);
      }
    }
    if (failed) this._bad(topic, failed);
    else if (this.badTopics.delete(topic) && this.badTopics.size === 0) this.onBadMessage(null);
  }

  _bad(topic, reason) {
    this.badTopics.set(topic, reason);
    this.onBadMessage(topic, reason);
  }

  _set(state, detail = "") {
    this.state = state;
    this.onState(state, detail);
  }

  subscribe(topic, handler) {
    if (!this.handlers.has(topic)) {
      this.handlers.set(topic, []);
      if (this.connected) this.client.subscribe(topic, { qos: 1 });
    }
    this.handlers.get(topic).push(handler);
  }

  onConnect(hook) { this.connectHooks.push(hook); }

  publish(topic, body) {
    return new Promise((resolve) => {
      if (!this.client || !this.connected) { resolve(false); return; }
      this.client.publish(topic, JSON.stringify(body), { qos: 1, retain: false },
        (err) => resolve(!err));
    });
  }

  end() { if (this.client) this.client.end(true); }
}

// Commands of one table: sent on {root}/cmd/by/{username}, answered on
// {root}/cmd/response/{username} (mqtt-api.md section 4). `whoami` decides the role.
// If the per-user topic gives no answer within the timeout, the page asks once on the
// table's shared {root}/cmd: a daemon that answers there but does not know `whoami`
// predates per-user commands ("shared" mode: commands go to {root}/cmd, the broker's ACL
// decides). A daemon that does know it serves per-user topics: the silence was the daemon
// or the broker away (a restart, an outage), so the page asks on the per-user topic once
// more and never takes the shared topic's identity ("anonymous") for its user. No answer
// leaves the page read-only (every command button disabled) until the daemon is back.
export class Commander {
  constructor(link, root, username, timeoutS, onChange) {
    this.link = link;
    this.root = root;
    this.username = username;
    this.timeoutMs = Math.round((timeoutS || 3) * 1000);
    this.onChange = onChange;
    this.mode = "pending"; // "per_user" | "shared" | "read_only" | "pending"
    this.role = null;
    this.commands = null; // null: unknown (shared mode: every button enabled)
    this.waiting = new Map();
    this.late = new Map(); // request_id -> its log entry, sent and not answered in time
    this.log = []; // newest first: {command, ok, code, message, at, pending, late}
    this.mine = `${root}/cmd/response/${username}`;
    link.subscribe(this.mine, (data) => this._answer(data));
    link.subscribe(`${root}/cmd/response`, (data) => this._answer(data));
  }

  get topic() {
    return this.mode === "shared" ? `${this.root}/cmd` : `${this.root}/cmd/by/${this.username}`;
  }

  allows(command) {
    if (this.mode === "read_only" || this.mode === "pending") return false;
    if (!this.link.connected) return false;
    return this.commands === null || this.commands.includes(command);
  }

  _answer(data) {
    if (!data || typeof data !== "object") return;
    const wait = this.waiting.get(String(data.request_id));
    const entry = this.late.get(String(data.request_id));
    if (!wait && entry) {
      // A command that had no answer in time (the daemon was away) was answered after
      // all: it may have been applied. The log says what happened, not what was feared.
      this.late.delete(String(data.request_id));
      Object.assign(entry, { ok: !!data.ok, code: data.error && data.error.code,
        message: data.error && data.error.message, pending: false, late: true });
      this.onChange();
      return;
    }
    if (!wait) return;
    this.waiting.delete(String(data.request_id));
    clearTimeout(wait.timer);
    wait.resolve(data);
  }

  _request(topic, command, fields, timeoutMs) {
    const request_id = `console-${this.username}-${Date.now().toString(36)}-${++counter}`;
    const body = { request_id, command, operator: this.username || "console", ...fields };
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiting.delete(request_id);
        resolve({ request_id, command, ok: false, timeout: true,
          error: { code: "no_answer", message: `no answer within ${timeoutMs / 1000} s` } });
      }, timeoutMs);
      this.waiting.set(request_id, { resolve, timer });
      this.link.publish(topic, body).then((sent) => {
        if (!sent) {
          clearTimeout(timer);
          this.waiting.delete(request_id);
          resolve({ request_id, command, ok: false,
            error: { code: "not_sent", message: "not connected to the broker" } });
        }
      });
    });
  }

  _perUserAnswer(answer) {
    this.mode = "per_user";
    const r = answer.ok && answer.result ? answer.result : {};
    this.role = r.role || null;
    this.commands = Array.isArray(r.commands) ? r.commands : [];
    this.onChange();
  }

  _readOnly() {
    this.mode = "read_only";
    this.role = null;
    this.commands = [];
    this.onChange();
  }

  async whoami() {
    const perUserTopic = `${this.root}/cmd/by/${this.username}`;
    const perUser = await this._request(perUserTopic, "whoami", {}, this.timeoutMs);
    if (!perUser.timeout) return this._perUserAnswer(perUser);
    const shared = await this._request(`${this.root}/cmd`, "whoami", {}, this.timeoutMs);
    if (shared.timeout) return this._readOnly();
    if (shared.ok && shared.result) {
      // It knows whoami, so it serves this user's topic: ask there again.
      const again = await this._request(perUserTopic, "whoami", {}, this.timeoutMs);
      return again.timeout ? this._readOnly() : this._perUserAnswer(again);
    }
    this.mode = "shared"; // a daemon from before roles: the broker's ACL decides
    this.role = null;
    this.commands = null;
    this.onChange();
  }

  async send(command, fields = {}, { quiet = false } = {}) {
    const answer = await this._request(this.topic, command, fields, 10000);
    if (!quiet) {
      const entry = { command, ok: !!answer.ok, code: answer.error && answer.error.code,
        message: answer.error && answer.error.message, at: new Date(),
        pending: !!answer.timeout, late: false };
      // Sent, not answered in time: the broker keeps it for the daemon, which may still
      // apply it. Its answer, when it comes, updates this entry.
      if (answer.timeout) this.late.set(answer.request_id, entry);
      this.log.unshift(entry);
      this.log.length = Math.min(this.log.length, 20);
      this.onChange();
    }
    return answer;
  }
}
