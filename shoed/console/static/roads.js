// The scoreboard, drawn from {root}/roads (roads.md section 7): every cell where the
// message puts it (`col`, `row`); the page computes nothing of the roads itself.
import { h } from "./dom.js";

const LETTER = { banker: "B", player: "P", tie: "T" };

function grid(kind, rows, cells, minCols, draw, testid) {
  const cols = Math.max(minCols, ...cells.map((c) => c.col + 2));
  const g = h("div", { class: `grid ${kind}`, style: `--rows:${rows}` });
  g.style.gridTemplateColumns = `repeat(${cols}, var(--c))`;
  for (const c of cells) {
    const el = draw(c);
    el.classList.add("rc");
    el.dataset.col = c.col;
    el.dataset.row = c.row;
    el.style.gridColumn = String(c.col + 1);
    el.style.gridRow = String(c.row + 1);
    g.append(el);
  }
  const wrap = h("div", { class: "road", "data-testid": testid }, g);
  // Keep the newest column in view, as a scoreboard does, scrolled no further: the empty
  // columns kept after it must not push the first ones out of a narrow view.
  let newest = null;
  for (const el of g.children) if (!newest || Number(el.dataset.col) > Number(newest.dataset.col)) newest = el;
  requestAnimationFrame(() => {
    wrap.scrollLeft = newest ? Math.max(0, newest.offsetLeft + newest.offsetWidth - wrap.clientWidth + 2) : 0;
  });
  return wrap;
}

function dots(el, c) {
  if (c.banker_pair) el.append(h("span", { class: "dot bp", title: "banker pair" }));
  if (c.player_pair) el.append(h("span", { class: "dot pp", title: "player pair" }));
}

export function beadPlate(roads, minCols = 12) {
  return grid("big", roads.rows || 6, roads.bead_plate || [], minCols, (c) => {
    const el = h("div", { "data-winner": c.winner, "data-hand": c.hand_no,
      title: `hand ${c.hand_no}: ${c.winner}` },
    h("div", { class: `bead ${c.winner}${c.natural ? " natural" : ""}` }, LETTER[c.winner] || ""));
    dots(el, c);
    return el;
  }, "bead-plate");
}

export function bigRoad(roads, minCols = 30) {
  return grid("big", roads.rows || 6, roads.big_road || [], minCols, (c) => {
    const el = h("div", { "data-winner": c.winner || "", "data-ties": c.ties || 0,
      "data-hand": c.hand_no === null ? "" : c.hand_no,
      class: c.natural ? "natural" : "",
      title: c.winner ? `hand ${c.hand_no}: ${c.winner}${c.ties ? `, ${c.ties} tie(s)` : ""}`
        : `${c.ties} tie(s)` },
    h("div", { class: `ring ${c.winner || "none"}` }));
    if (c.ties) {
      el.append(h("span", { class: "tie-mark" }));
      if (c.ties > 1) el.append(h("span", { class: "tie-count" }, c.ties));
    }
    dots(el, c);
    return el;
  }, "big-road");
}

const MARK = { big_eye_boy: "mark-beb", small_road: "mark-small", cockroach_pig: "mark-roach" };
const TESTID = { big_eye_boy: "big-eye-boy", small_road: "small-road",
  cockroach_pig: "cockroach-pig" };
export const TITLES = { big_eye_boy: "Big Eye Boy", small_road: "Small Road",
  cockroach_pig: "Cockroach Pig" };

export function derivedRoad(roads, name, minCols = 24) {
  const road = roads[name] || { marks: [], cells: [] };
  const cells = (road.cells || []).map((c, i) => ({ ...c,
    colour: c.colour || c.mark || (road.marks || [])[i] }));
  return grid("derived", roads.rows || 6, cells, minCols, (c) =>
    h("div", { "data-colour": c.colour }, h("span", { class: `${MARK[name]} ${c.colour}` })),
  TESTID[name]);
}

export function askRoad(roads) {
  const ask = roads.ask || {};
  const side = (who) => h("div", { class: "side-ask", "data-side": who },
    h("span", { class: `who ${who}` }, LETTER[who]),
    ...["big_eye_boy", "small_road", "cockroach_pig"].map((name) => {
      const colour = (ask[who] || {})[name] || null;
      return h("span", { class: `am ${colour ? "" : "none"}`, "data-road": name,
        "data-colour": colour || "", title: `${TITLES[name]}: ${colour || "not started"}` },
      colour ? h("span", { class: `${MARK[name]} ${colour}` }) : "\u00b7");
    }));
  return h("div", { class: "ask", "data-testid": "ask-road" }, side("banker"), side("player"));
}

export function statsHeader(roads) {
  const s = roads.stats || {};
  const item = (key, label, cls = "") =>
    h("span", { class: `stat ${cls}`, "data-stat": key }, label, h("b", {}, s[key] ?? 0));
  const streak = s.current_streak;
  return h("div", { class: "stats", "data-testid": "stats" },
    item("hands", "Hands"), item("banker", "Banker", "banker"), item("player", "Player", "player"),
    item("tie", "Tie", "tie"), item("banker_pair", "B pair", "banker"),
    item("player_pair", "P pair", "player"), item("natural", "Natural"),
    item("longest_banker_streak", "Longest B", "banker"),
    item("longest_player_streak", "Longest P", "player"),
    h("span", { class: "stat", "data-stat": "current_streak" }, "Streak",
      h("b", {}, streak ? `${LETTER[streak.side]}\u00d7${streak.length}` : "\u2014")));
}

export const EMPTY_ROADS = { rows: 6, bead_plate: [], big_road: [],
  big_eye_boy: { marks: [], cells: [] }, small_road: { marks: [], cells: [] },
  cockroach_pig: { marks: [], cells: [] }, ask: {}, stats: {} };

export function scoreboard(roads) {
  const r = roads || EMPTY_ROADS;
  return h("section", { class: "panel board" },
    statsHeader(r),
    h("div", { class: "bead-wrap" }, h("div", { class: "road-title" }, "Bead plate"), beadPlate(r),
      h("div", { class: "road-title" }, "Ask road"), askRoad(r)),
    h("div", { class: "roads-right" },
      h("div", { class: "road-title" }, "Big road"), bigRoad(r),
      h("div", { class: "derived-row" },
        ...["big_eye_boy", "small_road", "cockroach_pig"].map((name) => h("div", {},
          h("div", { class: "road-title" }, TITLES[name]), derivedRoad(r, name)))),
      roads ? null : h("div", { class: "none-note" }, "No scoreboard from the table yet")));
}
