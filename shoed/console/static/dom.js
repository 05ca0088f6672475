// Small DOM helpers shared by the pages (no framework: plain ES modules).

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// replaceChildren, leaving out null/undefined/false (conditional parts of a view).
export function put(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

const SUIT = { S: "\u2660", H: "\u2665", D: "\u2666", C: "\u2663" };
const RANK = { T: "10" };

export function cardLabel(card) {
  if (!card) return "?";
  return (RANK[card[0]] || card[0]) + SUIT[card[1]];
}

export function isRed(card) { return !!card && (card[1] === "H" || card[1] === "D"); }

// A playing card; `card` null draws an unread card.
export function cardEl(card, { position = null, small = false, source = null, index = null } = {}) {
  const attrs = { class: "card", "data-testid": "card", "data-card": card || "" };
  if (position) attrs["data-position"] = position;
  if (index !== null && index !== undefined) attrs["data-card-index"] = index;
  if (!card) {
    attrs.class += " unread" + (small ? " small" : "");
    attrs.title = "unread card" + (index ? ` #${index}` : "");
    return h("div", attrs, "?");
  }
  attrs.class += (isRed(card) ? " red" : "") + (small ? " small" : "") +
    (source === "manual" ? " manual" : "");
  const rank = RANK[card[0]] || card[0];
  attrs.title = `${cardLabel(card)}${index ? ` #${index}` : ""}${source === "manual" ? " (entered by hand)" : ""}`;
  return h("div", attrs,
    h("div", { class: "corner" }, rank, h("br"), SUIT[card[1]]),
    h("div", { class: "big" }, SUIT[card[1]]),
    h("div", { class: "corner bottom" }, rank, h("br"), SUIT[card[1]]));
}

export function baccaratValue(card) {
  if (!card) return 0;
  const i = "A23456789TJQK".indexOf(card[0]);
  return i < 9 ? i + 1 : 0;
}

export function human(code) {
  return String(code || "").replaceAll("_", " ");
}

export function fmtTime(ts) {
  if (ts === null || ts === undefined || ts === "") return "\u2014";
  const d = typeof ts === "number" ? new Date(ts * 1000) : new Date(ts);
  if (Number.isNaN(d.getTime())) return String(ts);
  return d.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

export function fmtAgo(ts) {
  if (ts === null || ts === undefined) return "";
  const d = typeof ts === "number" ? ts * 1000 : Date.parse(ts);
  const s = Math.max(0, Math.round((Date.now() - d) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  return `${Math.floor(s / 3600)} h ago`;
}
