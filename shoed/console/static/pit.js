// The pit page: every table's state, last result and big road, alarms highlighted.
import { h, put, human } from "./dom.js";
import { bigRoad } from "./roads.js";
import { checkEvent, checkObject, checkRoads, checkState } from "./shape.js";

class Tile {
  constructor(table, link) {
    this.table = table;
    this.el = h("section", { class: "panel tile", "data-testid": "pit-table", "data-table": table.table_id,
      onclick: () => { location.href = `/?table=${encodeURIComponent(table.table_id)}`; } });
    this.status = null; this.state = null; this.roads = null; this.result = null;
    const root = table.root;
    // Each message is checked (shape.js) before it replaces the last good one.
    link.subscribe(`${root}/status`, (d) => { this.status = d && checkObject(d, "status"); this.render(); });
    link.subscribe(`${root}/state`, (d) => { this.state = d && checkState(d); this.render(); });
    link.subscribe(`${root}/roads`, (d) => { this.roads = d && checkRoads(d); this.render(); });
    link.subscribe(`${root}/events`, (e) => {
      if (e) checkEvent(e);
      if (e && e.type === "hand_result") { this.result = e; this.render(); }
      if (e && e.type === "shoe_started") { this.result = null; this.render(); }
    });
    this.render();
  }

  render() {
    const s = this.state || {};
    const alarms = s.alarms || [];
    // No status at all (a daemon never seen on this broker) counts as a table to look at.
    const alarmed = alarms.length > 0 || !!s.hold || !this.status || this.status.online === false;
    this.el.classList.toggle("alarmed", alarmed);
    this.el.dataset.alarmed = String(alarmed);
    const online = this.status ? !!this.status.online : null;
    let r = this.result;
    const beads = (this.roads && this.roads.bead_plate) || [];
    if ((!r || r.shoe_id !== s.shoe_id) && beads.length) {  // before any live result
      const last = beads[beads.length - 1];
      r = { hand_no: last.hand_no, winner: last.winner, player_total: null, banker_total: null };
    }
    put(this.el, 
      h("div", { class: "row" }, h("span", { class: "tname" }, this.table.table_id),
        h("span", { class: `badge ${online ? "ok" : online === false ? "bad" : "warn"}` }, online ? "online" : online === false ? "offline" : "no status"),
        h("span", { "data-field": "shoe_state" }, s.shoe_state ? human(s.shoe_state) : "\u2014"),
        h("span", { class: "spacer", style: "flex:1" }),
        h("span", {}, s.hand_no ? `hand ${s.hand_no}` : "")),
      h("div", { class: "row" }, h("span", { class: "lr", "data-testid": "pit-result", "data-winner": r ? r.winner : "" },
        r ? `Hand ${r.hand_no}: ${r.winner === "tie" ? "TIE" : `${r.winner.toUpperCase()}`}${r.player_total === null ? "" : ` ${r.player_total}\u2013${r.banker_total}`}` : "no result yet"),
      s.hold ? h("span", { class: "badge warn" }, `held: ${(s.hold.reasons || []).map(human).join(", ")}`) : null),
      alarms.length ? h("div", { class: "tile-alarms", "data-testid": "pit-alarms" }, alarms.map((a) => human(a.code)).join(", ")) : null,
      bigRoad(this.roads || { rows: 6, big_road: [] }, 24));
  }
}

export function pitPage(config, link, mount) {
  const grid = h("div", { class: "pit-grid" });
  put(mount, h("div", { class: "pit", "data-testid": "pit" },
    h("div", { class: "pit-head" }, h("h1", {}, "Pit"), h("span", { class: "role" }, `${config.tables.length} tables`)),
    grid));
  for (const table of config.tables) grid.append(new Tile(table, link).el);
}
