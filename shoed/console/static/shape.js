// The shapes the page draws, checked before a message replaces the last good one
// (mqtt-api.md, roads.md). A message of another shape throws here, before anything
// changed: link.js reports it as skipped and the page keeps what it showed.
const isObj = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const absent = (v) => v === undefined || v === null;

function need(ok, what) {
  if (!ok) throw new Error(what);
}

function list(value, what, item, optional = true) {
  if (optional && absent(value)) return;
  need(Array.isArray(value), `${what} is not a list`);
  value.forEach((x, i) => item(x, `${what}[${i}]`));
}

const obj = (v, what) => need(isObj(v), `${what} is not an object`);
const text = (v, what) => need(typeof v === "string", `${what} is not a string`);
const optText = (v, what) => need(absent(v) || typeof v === "string", `${what} is not a string`);
const optNumber = (v, what) => need(absent(v) || Number.isFinite(v), `${what} is not a number`);

function card(c, what) {
  obj(c, what);
  optText(c.position, `${what}.position`);
  optText(c.card, `${what}.card`);
  optNumber(c.card_index, `${what}.card_index`);
}

function alarm(a, what) {
  obj(a, what);
  text(a.code, `${what}.code`);
}

export function checkState(s) {
  obj(s, "state");
  optText(s.shoe_state, "state.shoe_state");
  optNumber(s.hand_no, "state.hand_no");
  list(s.cards, "state.cards", card);
  list(s.pending_cards, "state.pending_cards", card);
  list(s.alarms, "state.alarms", alarm);
  if (!absent(s.hold)) {
    obj(s.hold, "state.hold");
    list(s.hold.reasons, "state.hold.reasons", text);
    list(s.hold.allowed, "state.hold.allowed", text);
  }
  return s;
}

function cells(value, what) {
  list(value, what, (c, w) => {
    obj(c, w);
    need(Number.isInteger(c.col) && Number.isInteger(c.row) && c.col >= 0 && c.row >= 0
      && c.col < 10000 && c.row < 100, `${w} has no place (col, row)`);
  });
}

export function checkRoads(r) {
  obj(r, "roads");
  optNumber(r.rows, "roads.rows");
  cells(r.bead_plate, "roads.bead_plate");
  cells(r.big_road, "roads.big_road");
  for (const name of ["big_eye_boy", "small_road", "cockroach_pig"]) {
    if (absent(r[name])) continue;
    obj(r[name], `roads.${name}`);
    cells(r[name].cells, `roads.${name}.cells`);
    list(r[name].marks, `roads.${name}.marks`, optText);
  }
  if (!absent(r.ask)) obj(r.ask, "roads.ask");
  if (!absent(r.stats)) obj(r.stats, "roads.stats");
  return r;
}

export function checkEvent(e) {
  obj(e, "event");
  text(e.type, "event.type");
  if (e.type === "card") card(e, "card event");
  if (e.type === "hand_result") {
    text(e.winner, "hand_result.winner");
    list(e.player_cards, "hand_result.player_cards", text, false);
    list(e.banker_cards, "hand_result.banker_cards", text, false);
  }
  if (e.type === "alarm") alarm(e, "alarm event");
  return e;
}

export function checkObject(value, what) {
  obj(value, what);
  return value;
}
