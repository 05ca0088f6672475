// One table's page: the hand, the result, the scoreboard, health, alarms, hold, commands
// and the last hands, live from the table's topics (mqtt-api.md, roads.md).
import { h, put, cardEl, baccaratValue, human, fmtTime, fmtAgo, cardLabel, isRed } from "./dom.js";
import { scoreboard } from "./roads.js";
import { Commander } from "./link.js";
import { checkEvent, checkObject, checkRoads, checkState } from "./shape.js";

const PLAYER = ["P1", "P2", "P3"];
const BANKER = ["B1", "B2", "B3"];
const HAND_POSITIONS = new Set(["burn", ...PLAYER, ...BANKER]);

// A hand's result as its hand_result event has it, from its `recall` record (which keeps
// the winner, the cards, the totals and the payouts): the facts follow from the cards as
// shoed/core/game.py has them (a natural: the first two cards' total 8 or 9; a pair: their
// ranks equal; Big: more than 4 cards; Banker six: Banker wins on 6).
function resultFromRecord(rec) {
  const r = rec.result, p = r.player_cards, b = r.banker_cards;
  const two = (cards) => (baccaratValue(cards[0]) + baccaratValue(cards[1])) % 10;
  const dealt = p.length + b.length;
  return { ...r, hand_no: rec.hand_no,
    player_natural: two(p) >= 8, banker_natural: two(b) >= 8,
    player_pair: p[0][0] === p[1][0], banker_pair: b[0][0] === b[1][0],
    cards_dealt: dealt, big_small: dealt === 4 ? "small" : "big",
    banker_six: r.winner === "banker" && r.banker_total === 6 };
}
const BETS = ["banker", "player", "tie", "banker_pair", "player_pair", "big", "small"];
const BET_NAMES = { banker: "Banker", player: "Player", tie: "Tie", banker_pair: "B pair",
  player_pair: "P pair", big: "Big", small: "Small", banker_six: "Banker six" };
const SUPERVISOR = ["close_betting", "end_shoe", "new_shoe", "void_shoe"];
const COMMAND_NAMES = { manual_card: "Enter card", resume: "Resume", void_hand: "Void hand",
  realign: "Realign", void_shoe: "Void shoe", end_shoe: "End shoe", new_shoe: "New shoe",
  close_betting: "Close betting", ack_alarm: "Acknowledge" };
const RELEASE = {
  card_unread: "A card was not read: enter it from the card itself (Enter card), or void the hand.",
  foreign_card: "A card not of this shoe's decks: enter the card it really is, or void the hand.",
  excess_card: "A card too many: enter it, realign, or void the hand.",
  duplicate_uid: "A card identity seen twice: enter the card, or void the hand.",
  shoe_unshuffled: "The shoe's order looks unshuffled: look at the cards, then resume, void the hand or void the shoe.",
  cards_lost: "Frames from the shoe were lost, so a card may be missing: check the cards on the layout against those shown, then resume, realign or void the hand.",
  incomplete_pull: "A multi-card pull came in part: check the cards on the layout against those shown, then resume, realign or void the hand.",
  device_rebooted: "The shoe restarted during the hand: check the cards on the layout against those shown, then resume, realign or void the hand.",
  cover_open: "The shoe's cover was opened during the hand: check the shoe and the cards, then resume or void the hand.",
};
const NEEDS_REASON = new Set(["void_hand", "void_shoe"]);

export class TablePage {
  constructor(root, tableId, link, username, config, mount) {
    this.root = root;
    this.tableId = tableId;
    this.link = link;
    this.username = username;
    this.mount = mount;
    this.status = null;
    this.device = null;
    this.state = null;
    this.roads = null;
    this.lastEventTs = null;
    this.shoeId = null;
    this.alarmHistory = [];
    this.recall = null;
    this.hand = { hand_no: null, cards: new Map(), pending: new Map(), result: null, voided: null };
    this.confirm = null; // {command, fields, card, reason, position}
    this.cmd = new Commander(link, root, username, config.whoami_timeout_s,
      () => this.renderControls());
    this.build();
    // Each message is checked (shape.js) before it replaces the last good one.
    link.subscribe(`${root}/status`, (d) => {
      this.status = d && checkObject(d, "status");
      // Until an event comes, the last one is the status's last publish (epoch seconds).
      const last = this.status && this.status.last_publish;
      if (!this.lastEventTs && typeof last === "number" && last > 0) this.lastEventTs = new Date(last * 1000).toISOString();
      this.renderHealth(); this.renderHeader(); this._maybeWhoami();
    });
    link.subscribe(`${root}/device`, (d) => { this.device = d && checkObject(d, "device"); this.renderHealth(); });
    link.subscribe(`${root}/state`, (d) => this.onState(d && checkState(d)));
    link.subscribe(`${root}/roads`, (d) => { this.roads = d && checkRoads(d); this.renderBoard(); });
    link.subscribe(`${root}/events`, (d) => this.onEvent(d && checkEvent(d)));
    link.onConnect(() => { this.cmd.mode = this.cmd.mode === "per_user" ? "per_user" : "pending"; this._askAll(); });
    setInterval(() => this.renderHealth(), 5000);
  }

  async _askAll() {
    await this.cmd.whoami();
    this.renderControls();
    this.askRecall();
    if (!this.roads) this.askRoads();
  }

  _maybeWhoami() {
    // The daemon came (back) online after the page gave up on whoami: ask again.
    if (this.status && this.status.online && this.cmd.mode === "read_only" && !this._asking) {
      this._asking = true;
      this._askAll().finally(() => { this._asking = false; });
    }
  }

  async askRecall() {
    if (this.cmd.mode === "read_only" || this.cmd.mode === "pending") return;
    const answer = await this.cmd.send("recall", { hands: 10 }, { quiet: true });
    if (answer.ok && answer.result) {
      this.recall = answer.result.hands || [];
      this.renderRecall();
      this._endFromRecall();
      this._historyFromRecall(answer.result.alarm_history);
    }
  }

  // The current shoe's alarm events as recall gives them (newest first; a daemon before
  // the field gives none): merged with what the page saw live, by seq, newest first.
  _historyFromRecall(history) {
    if (!Array.isArray(history)) return;
    const bySeq = new Map(this.alarmHistory.map((a) => [a.seq, a]));
    for (const a of history) if (a && typeof a.seq === "number" && !bySeq.has(a.seq)) bySeq.set(a.seq, { ...a, shoe_id: this.shoeId });
    this.alarmHistory = [...bySeq.values()].sort((a, b) => b.seq - a.seq).slice(0, 200);
    this.historyFromShoe = true;
    this.renderAlarms();
  }

  // The hand shown ended while the page was away (a lost connection: its hand_result or
  // hand_voided never came): finish it from its `recall` record (outside review: the
  // panel stayed on "IN PLAY" until the next card).
  _endFromRecall() {
    const hand = this.hand;
    if (hand.hand_no === null || hand.result || hand.voided || !this.recall) return;
    const rec = this.recall.find((r) => r.hand_no === hand.hand_no && r.shoe_id === this.shoeId);
    if (!rec || (!rec.result && !rec.voided)) return;
    for (const c of rec.cards || []) {
      if (HAND_POSITIONS.has(c.position)) {
        hand.cards.set(c.position, { position: c.position, card: c.card, card_index: c.card_index, source: c.source });
        hand.pending.delete(c.card_index);
      }
    }
    if (rec.result) hand.result = resultFromRecord(rec);
    if (rec.voided) hand.voided = { hand_no: rec.hand_no, reason: rec.voided.reason || "voided" };
    this.renderHand();
  }

  async askRoads() {
    if (this.cmd.mode === "read_only" || this.cmd.mode === "pending") return;
    const answer = await this.cmd.send("roads", {}, { quiet: true });
    if (answer.ok && answer.result && !this.roads) { this.roads = answer.result; this.renderBoard(); }
  }

  // ---- inputs -------------------------------------------------------------------------
  onState(state) {
    if (!state) return;
    this.state = state;
    if (state.shoe_id !== this.shoeId) {
      if (this.shoeId !== null) this.alarmHistory = this.alarmHistory.filter((a) => a.shoe_id === state.shoe_id);
      this.shoeId = state.shoe_id;
    }
    const inHand = (state.cards || []).length || (state.pending_cards || []).length;
    if (inHand && state.shoe_state !== "commencement") {
      if (this.hand.hand_no !== state.hand_no || this.hand.result) this._newHand(state.hand_no);
      // The state lists no `source`: a card entered by hand keeps its mark from its event.
      const known = new Map([...this.hand.cards.values()].map((c) => [c.card_index, c]));
      this.hand.cards = new Map((state.cards || []).map((c) => {
        const seen = known.get(c.card_index);
        return [c.position, seen && seen.card === c.card && seen.source ? { ...c, source: seen.source } : c];
      }));
      this.hand.pending = new Map((state.pending_cards || []).map((c) => [c.card_index, c]));
    } else if (state.shoe_state === "commencement") {
      this._newHand(null);
    } else {
      this.hand.pending = new Map((state.pending_cards || []).map((c) => [c.card_index, c]));
      // Between hands while the page shows one unfinished: it ended while we were away.
      if (this.hand.hand_no !== null && !this.hand.result && !this.hand.voided) {
        this.hand.endedAway = true;  // said so until its record comes (or none can)
        this._endFromRecall();
        if (!this.hand.result && !this.hand.voided) this.askRecall();
      }
    }
    this.renderHand();
    this.renderHeader();
    this.renderAlarms();
    this.renderControls();
  }

  _newHand(handNo) {
    this.otherCards = [];
    this.hand = { hand_no: handNo, cards: new Map(), pending: new Map(), result: null, voided: null };
  }

  onEvent(e) {
    if (!e || typeof e !== "object") return;
    this.lastEventTs = e.ts || this.lastEventTs;
    switch (e.type) {
      case "card": this.onCard(e); break;
      case "hand_result":
        if (this.hand.hand_no !== e.hand_no) this._newHand(e.hand_no);
        this.hand.result = e;
        e.player_cards.forEach((c, i) => this._place(PLAYER[i], c));
        e.banker_cards.forEach((c, i) => this._place(BANKER[i], c));
        this.renderHand();
        this.askRecall();
        break;
      case "hand_voided":
        if (this.hand.hand_no === e.hand_no) { this.hand.voided = e; this.renderHand(); }
        this.askRecall();
        break;
      case "shoe_started":
        this.alarmHistory = [];
        this._newHand(null);
        this.renderHand();
        break;
      case "alarm":
        this.alarmHistory.unshift(e);
        this.alarmHistory.length = Math.min(this.alarmHistory.length, 200);
        this.renderAlarms();
        break;
      default: break;
    }
    this.renderHealthLastEvent();
  }

  _place(position, card) {
    const had = this.hand.cards.get(position);
    if (!had || had.card !== card) this.hand.cards.set(position, { position, card, card_index: had ? had.card_index : null });
  }

  onCard(e) {
    if (e.position && HAND_POSITIONS.has(e.position)) {
      if (e.hand_no !== null && e.hand_no !== undefined && this.hand.hand_no !== e.hand_no) {
        if (this.hand.hand_no !== null && e.hand_no < this.hand.hand_no) return; // an older hand
        this._newHand(e.hand_no);
      }
      for (const [pos, c] of this.hand.cards) if (c.card_index === e.card_index && pos !== e.position) this.hand.cards.delete(pos);
      this.hand.cards.set(e.position, { position: e.position, card: e.card, card_index: e.card_index, source: e.source });
      this.hand.pending.delete(e.card_index);
      this.renderHand();
    } else if (e.position === null) {
      this.hand.pending.set(e.card_index, { card: e.card, card_index: e.card_index });
      this.renderHand();
    } else if (e.position) {  // commencement, its burns, unnecessary and stray cards
      this.otherCards = (this.otherCards || []).filter((c) => c.card_index !== e.card_index);
      this.otherCards.push(e);
      if (this.otherCards.length > 12) this.otherCards.shift();
      this.renderHand();
    }
  }

  // ---- layout -------------------------------------------------------------------------
  build() {
    this.els = {
      header: h("header", { class: "topbar" }),
      hand: h("section", { class: "panel hand", "data-testid": "hand" }),
      result: h("section", { class: "panel result", "data-testid": "result", "data-state": "none" }),
      board: h("div"),
      health: h("section", { class: "panel health", "data-testid": "health" }),
      alarms: h("section", { class: "panel alarms", "data-testid": "alarms" }),
      hold: h("section", { class: "panel hold", "data-testid": "hold", hidden: true }),
      controls: h("section", { class: "panel controls", "data-testid": "commands" }),
      recall: h("section", { class: "panel recall", "data-testid": "recall" }),
    };
    const e = this.els;
    put(this.mount, h("div", { class: "table-page", "data-table": this.tableId },
      e.header,
      h("div", { class: "left" }, e.hand, e.result, e.board),
      h("div", { class: "right" }, e.hold, e.alarms, e.health, e.controls, e.recall)));
    this.renderHeader(); this.renderHand(); this.renderBoard(); this.renderHealth();
    this.renderAlarms(); this.renderControls(); this.renderRecall();
  }

  renderHeader() {
    const s = this.state || {};
    // Without the broker the retained status is only the last one seen: not "online".
    const online = !this.link.connected ? null : this.status ? !!this.status.online : null;
    const kv = (label, value, testid) => h("div", { class: "kv", "data-testid": testid }, label, h("b", {}, value ?? "\u2014"));
    const shoeState = s.shoe_state ? human(s.shoe_state) : "\u2014";
    put(this.els.header, 
      h("span", { class: "table-name" }, `Table ${this.tableId}`),
      h("span", { class: `badge ${online ? "ok" : online === false ? "bad" : "warn"}`, "data-testid": "online" },
        !this.link.connected ? "no broker" : online ? "online" : online === false ? "offline" : "no status"),
      h("div", { class: "kv shoe-id", "data-testid": "shoe-id", title: s.shoe_id || "" }, "Shoe", h("b", {}, s.shoe_id ?? "\u2014")),
      kv("State", shoeState, "shoe-state"),
      kv("Hand", s.hand_no, "hand-no"),
      kv("Betting", s.betting, "betting"),
      kv("Played / voided", s.shoe_id ? `${s.hands_played} / ${s.hands_voided}` : null),
      h("span", { class: "spacer" }),
      h("span", { class: "role", "data-testid": "role", "data-role": this.cmd.role || "", "data-mode": this.cmd.mode }, this._roleText()),
      h("a", { href: "/", style: "color:var(--gold)" }, "Pit"),
      h("button", { onclick: () => { sessionStorage.removeItem("shoed.console.login"); location.reload(); } }, "Sign out"));
  }

  // The broker connection came or went: what depends on it is drawn again at once.
  onLinkState() {
    this.renderHealth();
    this.renderControls();
  }

  _roleText() {
    const who = this.username || "anonymous";
    switch (this.cmd.mode) {
      case "per_user": return `${who} \u00b7 ${this.cmd.role || "no role"}`;
      case "shared": return `${who} \u00b7 ${this.cmd.role || "role unknown (broker ACL decides)"}`;
      case "read_only": return `${who} \u00b7 read-only (no answer to whoami)`;
      default: return `${who} \u00b7 asking the table\u2026`;
    }
  }

  renderHand() {
    const hand = this.hand;
    const slots = (positions) => positions.map((p) => {
      const c = hand.cards.get(p);
      if (c) return cardEl(c.card, { position: p, source: c.source, index: c.card_index });
      return h("div", { class: `slot${p.endsWith("3") ? " third" : ""}`, "data-slot": p }, h("span", { class: "pos" }, p));
    }).map((el, i) => { if (i === 2 && el.classList.contains("card")) el.style.transform = "rotate(90deg)"; if (i === 2 && el.classList.contains("card")) el.style.margin = "0 18px"; return el; });
    const total = (positions) => {
      const cards = positions.map((p) => hand.cards.get(p)).filter(Boolean);
      if (!cards.length) return "";
      if (cards.some((c) => !c.card)) return "?";
      return String(cards.reduce((t, c) => t + baccaratValue(c.card), 0) % 10);
    };
    const r = hand.result;
    const burn = hand.cards.get("burn");
    const pending = [...hand.pending.values()];
    const s = this.state || {};
    const middle = h("div", { class: "middle" },
      h("div", { class: "hand-no" }, "Hand", h("b", {}, hand.hand_no ?? (s.shoe_state === "commencement" ? "\u2014" : "\u2014"))),
      h("div", { class: "burn" }, burn ? cardEl(burn.card, { position: "burn", small: true, source: burn.source, index: burn.card_index })
        : h("div", { class: "slot", style: "width:34px;height:48px", "data-slot": "burn" }), "burn"),
      pending.length ? h("div", { class: "pending", "data-testid": "pending" }, "Pending:",
        ...pending.map((c) => cardEl(c.card, { small: true, index: c.card_index }))) : null,
      s.shoe_state === "commencement" && s.commencement ? h("div", { class: "commencement" },
        "Commencement", h("br"), `card ${s.commencement.card ? cardLabel(s.commencement.card) : "?"}`,
        h("br"), `burns ${s.commencement.burns_drawn ?? 0} / ${s.commencement.burn_count ?? "?"}`) : null,
      (this.otherCards || []).length ? h("div", { class: "pending other", "data-testid": "other-cards" },
        ...this.otherCards.slice(-6).map((c) => h("span", { class: "other-card", title: human(c.position) },
          cardEl(c.card, { small: true, index: c.card_index, source: c.source }),
          h("small", {}, c.position === "commencement_burn" ? "burn" : c.position === "commencement" ? "first" : human(c.position))))) : null,
      s.next_position ? h("div", { class: "commencement" }, `next: ${s.next_position}`) : null);
    put(this.els.hand, 
      h("div", { class: "side player" }, h("div", { class: "label" }, "PLAYER"),
        h("div", { class: "total", "data-testid": "player-total" }, r ? r.player_total : total(PLAYER)),
        h("div", { class: "cards" }, slots(PLAYER))),
      middle,
      h("div", { class: "side banker" }, h("div", { class: "label" }, "BANKER"),
        h("div", { class: "total", "data-testid": "banker-total" }, r ? r.banker_total : total(BANKER)),
        h("div", { class: "cards" }, slots(BANKER))));
    this.renderResult();
  }

  renderResult() {
    const r = this.hand.result;
    const el = this.els.result;
    const voided = this.hand.voided;
    if (!r) {
      const away = !voided && this.hand.endedAway;
      el.dataset.state = voided ? "voided" : away ? "ended" : "none";
      el.removeAttribute("data-winner");
      el.removeAttribute("data-hand");
      put(el, h("div", { class: `winner ${voided ? "voided" : ""}` }, voided ? "HAND VOIDED" : away ? "HAND ENDED" : "IN PLAY",
        h("small", {}, voided ? human(voided.reason) : away ? `hand ${this.hand.hand_no} ended while the page was disconnected`
          : this.hand.hand_no ? `hand ${this.hand.hand_no}` : "waiting for cards")),
      h("div", { class: "none-note" }, away ? "Its result is in the last hands, when your role may ask for them." : "Payouts appear with the result."));
      return;
    }
    el.dataset.state = voided ? "voided" : "result";
    el.dataset.winner = r.winner;
    el.dataset.hand = r.hand_no;
    const flag = (on, text, key) => h("span", { class: `flag ${on ? "on" : ""}`, "data-flag": key, "data-on": on ? "true" : "false" }, text);
    const payouts = r.payouts || {};
    const bets = [...BETS.filter((b) => b in payouts), ...Object.keys(payouts).filter((b) => !BETS.includes(b))];
    put(el, 
      h("div", { class: `winner ${voided ? "voided" : r.winner}`, "data-testid": "winner" },
        voided ? "VOIDED" : r.winner === "tie" ? "TIE" : `${r.winner.toUpperCase()} WINS`,
        h("small", {}, `Player ${r.player_total} \u2014 Banker ${r.banker_total} \u00b7 hand ${r.hand_no}`)),
      h("div", {},
        h("div", { class: "flags" },
          flag(r.player_natural, "Player natural", "player_natural"),
          flag(r.banker_natural, "Banker natural", "banker_natural"),
          flag(r.player_pair, "Player pair", "player_pair"),
          flag(r.banker_pair, "Banker pair", "banker_pair"),
          h("span", { class: "flag on", "data-flag": "big_small" }, r.big_small === "big" ? `Big (${r.cards_dealt} cards)` : `Small (${r.cards_dealt} cards)`),
          r.banker_six ? flag(true, "Banker six", "banker_six") : null),
        h("div", { class: "payouts", "data-testid": "payouts" }, ...bets.map((bet) => {
          const v = payouts[bet];
          const kind = v > 0 ? "win" : v < 0 ? "lose" : "push";
          return h("div", { class: `payout ${kind}`, "data-testid": "payout", "data-bet": bet, "data-value": String(v) },
            h("div", { class: "bet" }, BET_NAMES[bet] || human(bet)),
            h("div", { class: "val" }, v > 0 ? `+${v}` : v < 0 ? `\u2212${Math.abs(v)}` : "push"));
        }))));
  }

  renderBoard() {
    put(this.els.board, scoreboard(this.roads));
  }

  renderHealthLastEvent() {
    const dd = this.els.health.querySelector('[data-field="last_event"]');
    if (dd) dd.textContent = this.lastEventTs ? `${fmtTime(this.lastEventTs)} (${fmtAgo(this.lastEventTs)})` : "\u2014";
  }

  renderHealth() {
    const st = this.status || {};
    const dv = this.device || {};
    const row = (key, label, value, cls = "") => [h("dt", {}, label), h("dd", { "data-field": key, class: cls }, value ?? "\u2014")];
    const yes = (v, okText = "yes", badText = "no") => v === true ? [okText, "ok"] : v === false ? [badText, "bad"] : ["\u2014", ""];
    const [onl, onlC] = yes(this.status ? !!st.online : null, "online", "offline");
    const [dev, devC] = yes(this.device ? !!dv.connected : (this.status ? !!st.device_connected : null), "connected", "not connected");
    const [sto, stoC] = yes(this.status ? st.storage_ok : null, "ok", `failing${st.storage_error ? `: ${st.storage_error}` : ""}`);
    const clock = st.clock_synchronised === true ? ["synchronised", "ok"] : st.clock_synchronised === false ? ["NOT synchronised", "bad"] : ["unknown", "warn"];
    const broker = this.link.connected ? ["connected", "ok"] : ["disconnected", "bad"];
    const outbox = st.outbox ?? null;
    // Without the broker the retained status and device are only the last ones seen:
    // said so, not shown as if live (outside review).
    const stale = (value, cls) => this.link.connected || value === "\u2014" ? [value, cls]
      : [`${value} (last known)`, "warn"];
    const [onlS, onlSC] = stale(onl, onlC);
    const [devS, devSC] = stale(dev, devC);
    put(this.els.health, h("h2", {}, "Table health"), h("dl", {},
      row("online", "Daemon", onlS, onlSC),
      row("device", "Shoe", devS, devSC),
      row("firmware", "Firmware", dv.firmware),
      row("serial_no", "Serial", dv.serial_no),
      row("faults", "Device faults", (dv.faults || []).length ? dv.faults.join(", ") : "none", (dv.faults || []).length ? "bad" : ""),
      row("broker", "Broker", `${broker[0]} (${this.link.url})`, broker[1]),
      row("storage", "Storage", sto, stoC),
      row("outbox", "Outbox", outbox === null ? null : `${outbox} event${outbox === 1 ? "" : "s"} to send${this.link.connected ? "" : " (last known)"}`, outbox > 0 || !this.link.connected ? "warn" : "ok"),
      row("clock", "Clock", clock[0], clock[1]),
      row("last_event", "Last event", this.lastEventTs ? `${fmtTime(this.lastEventTs)} (${fmtAgo(this.lastEventTs)})` : null),
      row("version", "shoed", st.version),
      ...((st.warnings || []).length ? row("warnings", "Warnings", st.warnings.join("; "), "bad") : [])));
  }

  renderAlarms() {
    const active = [...((this.state && this.state.alarms) || [])].sort((a, b) => String(b.since).localeCompare(String(a.since)));
    const el = this.els.alarms;
    el.classList.toggle("active", active.length > 0);
    const items = active.map((a) => h("div", { class: "alarm", "data-testid": "alarm", "data-alarm-id": a.alarm_id, "data-code": a.code },
      h("div", { class: "what" }, h("b", {}, human(a.code)),
        h("span", {}, [a.message, a.card_index ? `card #${a.card_index}` : null, a.fault_code ? `fault ${a.fault_code}` : null, `since ${fmtTime(a.since)}`].filter(Boolean).join(" \u00b7 "))),
      a.ackable ? h("button", { class: "primary", "data-testid": "ack", "data-alarm-id": a.alarm_id,
        disabled: !this.cmd.allows("ack_alarm"), onclick: () => this.cmd.send("ack_alarm", { alarm_id: a.alarm_id }) }, "Acknowledge") : null));
    const history = this.alarmHistory.map((a) => h("li", { class: a.active ? "raised" : "cleared", "data-testid": "alarm-history-item", "data-alarm-id": a.alarm_id },
      `${fmtTime(a.ts).slice(11, 19)} ${a.active ? "raised" : "cleared"} ${human(a.code)}${a.message ? ` \u2014 ${a.message}` : ""}`));
    put(el, h("h2", {}, `Alarms${active.length ? ` (${active.length} active)` : ""}`),
      ...(items.length ? items : [h("div", { class: "none-note" }, "No active alarm")]),
      h("div", { class: "road-title" }, "This shoe's alarm history"),
      history.length ? h("ul", { class: "history" }, ...history)
        : h("div", { class: "none-note" }, this.historyFromShoe ? "none in this shoe" : "none since the page opened"));
  }

  // ---- hold and commands --------------------------------------------------------------
  button(command, label, fields, cls = "", testid = "command", hold = null) {
    return h("button", { class: cls, "data-testid": testid, "data-command": command,
      disabled: !this.cmd.allows(command),
      title: this.cmd.allows(command) ? "" : "not allowed for this user (or not connected)",
      onclick: () => this.openConfirm(command, fields, hold) }, label || COMMAND_NAMES[command] || human(command));
  }

  // `hold`: the key of the hold the confirm was opened from (holdKey); when that hold
  // ends or becomes another one (someone else released it), the confirm is dropped: its
  // card and hand were that hold's.
  openConfirm(command, fields, hold = null) {
    this.confirm = { command, fields: { ...fields }, card: null, reason: NEEDS_REASON.has(command) ? "supervisor" : null, position: "burn", hold };
    this.renderControls();
  }

  async sendConfirm() {
    const c = this.confirm;
    if (!c) return;
    const fields = { ...c.fields };
    if (c.command === "manual_card") { if (!c.card) return; fields.card = c.card; }
    if (c.command === "realign") {
      if (!Number.isInteger(fields.card_index)) return;
      fields.position = c.position;
    }
    if (NEEDS_REASON.has(c.command)) fields.reason = c.reason || "supervisor";
    this.confirm = null;
    this.renderControls();
    await this.cmd.send(c.command, fields);
  }

  confirmPanel() {
    const c = this.confirm;
    if (!c) return null;
    const parts = [h("b", {}, `${COMMAND_NAMES[c.command] || human(c.command)}${c.fields.card_index ? ` \u2014 card #${c.fields.card_index}` : ""}${c.fields.hand_no ? ` \u2014 hand ${c.fields.hand_no}` : ""}`)];
    if (c.command === "manual_card") {
      const picker = h("div", { class: "picker", "data-testid": "card-picker" });
      for (const suit of "SHDC") for (const rank of "A23456789TJQK") {
        const card = rank + suit;
        picker.append(h("button", { class: isRed(card) ? "red" : "", "data-testid": "card-pick", "data-card": card,
          "aria-pressed": c.card === card ? "true" : "false",
          onclick: () => { c.card = card; this.renderControls(); } }, cardLabel(card)));
      }
      parts.push(picker);
    }
    if (c.command === "realign") {
      // The card that starts the new hand: the hold's card when it names one, else typed
      // (a hold of the shoe's order names none).
      const index = h("input", { "data-testid": "realign-card", type: "number", min: "1", step: "1",
        value: Number.isInteger(c.fields.card_index) ? String(c.fields.card_index) : "",
        oninput: (ev) => {
          const n = Number(ev.target.value);
          c.fields.card_index = ev.target.value !== "" && Number.isInteger(n) && n > 0 ? n : null;
          const send = ev.target.closest("[data-testid=confirm]").querySelector("[data-testid=confirm-send]");
          if (send) send.disabled = !Number.isInteger(c.fields.card_index);
        } });
      parts.push(h("label", {}, "Card # ", index));
      const sel = h("select", { "data-testid": "realign-position", onchange: (ev) => { c.position = ev.target.value; } },
        h("option", { value: "burn" }, "burn"), h("option", { value: "P1" }, "P1"));
      sel.value = c.position;
      parts.push(h("label", {}, "Position ", sel));
    }
    if (NEEDS_REASON.has(c.command)) {
      parts.push(h("label", {}, "Reason ", h("input", { "data-testid": "reason", value: c.reason,
        oninput: (ev) => { c.reason = ev.target.value; } })));
    }
    const ready = c.command === "manual_card" ? !!c.card
      : c.command === "realign" ? Number.isInteger(c.fields.card_index) : true;
    parts.push(h("div", { class: "actions" },
      h("button", { class: NEEDS_REASON.has(c.command) ? "danger" : "primary", "data-testid": "confirm-send", disabled: !ready,
        onclick: () => this.sendConfirm() }, c.command === "manual_card" ? (c.card ? `Enter ${cardLabel(c.card)}` : "Pick the card") : `Send ${COMMAND_NAMES[c.command] || c.command}`),
      h("button", { "data-testid": "confirm-cancel", onclick: () => { this.confirm = null; this.renderControls(); } }, "Cancel")));
    return h("div", { class: "confirm", "data-testid": "confirm", "data-command": c.command }, ...parts);
  }

  renderControls() {
    const s = this.state || {};
    const hold = s.hold;
    const holdEl = this.els.hold;
    holdEl.hidden = !hold;
    const key = hold ? `${hold.card_index ?? ""}|${(hold.reasons || []).join(",")}|${s.hand_no ?? ""}` : null;
    if (this.confirm && this.confirm.hold && this.confirm.hold !== key) this.confirm = null;
    if (hold) {
      const reasons = hold.reasons || [];
      const inConfirm = this.confirm && (hold.allowed || []).includes(this.confirm.command) && !SUPERVISOR.includes(this.confirm.command);
      holdEl.dataset.cardIndex = hold.card_index ?? "";
      put(holdEl, h("h2", {}, "Hold \u2014 dealing is stopped"),
        h("div", { class: "reasons", "data-testid": "hold-reasons" }, reasons.map(human).join(", ")),
        h("div", { class: "how" }, reasons.map((r) => RELEASE[r] || `Release: ${human(r)}.`).join(" "),
          hold.card_index ? ` (card #${hold.card_index})` : ""),
        h("div", { class: "actions" }, ...(hold.allowed || []).map((command) => {
          const fields = {};
          if (command === "manual_card" || command === "realign") fields.card_index = hold.card_index;
          if (command === "void_hand") fields.hand_no = s.hand_no;
          return this.button(command, null, fields, command.startsWith("void") ? "danger" : "primary", "hold-action", key);
        })),
        inConfirm ? this.confirmPanel() : null);
    }
    const commandsMode = s.betting === "open" || s.betting === "closed";
    const supervisorConfirm = this.confirm && !(hold && (hold.allowed || []).includes(this.confirm.command) && !SUPERVISOR.includes(this.confirm.command));
    const outcome = (l) => l.pending
      ? "no answer yet \u2014 the daemon may be away; it may still apply this when it is back, and its answer will show here"
      : `${l.ok ? "done" : `refused \u2014 ${l.code}${l.message ? `: ${l.message}` : ""}`}${l.late ? " (answered late)" : ""}`;
    const log = this.cmd.log.map((l) => h("li", { class: l.pending ? "waiting" : l.ok ? "ok" : "refused", "data-testid": "response", "data-command": l.command, "data-ok": String(l.ok), "data-code": l.code || "", "data-pending": String(!!l.pending) },
      `${l.at.toISOString().slice(11, 19)} ${COMMAND_NAMES[l.command] || l.command}: ${outcome(l)}`));
    put(this.els.controls, h("h2", {}, "Supervisor"),
      h("div", { class: "actions" },
        commandsMode ? this.button("close_betting", null, {}) : null,
        this.button("end_shoe", null, {}),
        this.button("new_shoe", null, {}),
        this.button("void_shoe", null, {}, "danger")),
      supervisorConfirm ? this.confirmPanel() : null,
      log.length ? h("ul", { class: "responses", "data-testid": "responses" }, ...log) : null);
    this.renderHeader();
    this.renderAlarms();
  }

  renderRecall() {
    const hands = this.recall;
    const items = (hands || []).slice(0, 10).map((rec) => {
      const r = rec.result || {};
      const voided = !!rec.voided;
      const w = voided ? "void" : r.winner || "";
      const cards = (side) => (rec.cards || []).filter((c) => c.position && c.position[0] === side)
        .map((c) => cardEl(c.card, { small: true, position: c.position, source: c.source, index: c.card_index }));
      return h("li", { "data-testid": "recall-hand", "data-hand": rec.hand_no, "data-winner": w },
        h("span", { class: "no" }, `#${rec.hand_no}`),
        h("span", { class: `w ${w}` }, voided ? "V" : (r.winner || "?")[0].toUpperCase()),
        h("span", { class: "cs" }, ...cards("P")), h("span", { class: "sep" }, "|"),
        h("span", { class: "cs" }, ...cards("B")),
        h("span", { class: "tot" }, voided ? human(rec.voided.reason || "voided") : r.winner ? `${r.player_total}\u2013${r.banker_total}` : ""));
    });
    put(this.els.recall, h("h2", {}, "Last hands"),
      items.length ? h("ol", {}, ...items) : h("div", { class: "none-note" }, hands ? "No hand yet" : "asked with recall once connected"));
  }
}
