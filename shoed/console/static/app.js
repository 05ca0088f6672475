// The console's entry point: the login, the broker connection, then the pit or a table.
import { Link } from "./link.js";
import { put } from "./dom.js";
import { TablePage } from "./table.js";
import { pitPage } from "./pit.js";

const KEY = "shoed.console.login";

function banner(state, detail) {
  const el = document.getElementById("connection");
  el.dataset.state = state;
  el.hidden = state === "connected";
  el.textContent = {
    connecting: "Connecting to the broker\u2026",
    disconnected: "Disconnected from the broker \u2014 reconnecting by itself; what is shown may be out of date",
    refused: `The broker refused the login${detail ? `: ${detail}` : ""}`,
  }[state] || "";
  document.body.dataset.connection = state;
}

// A message the page could not show was skipped; the rest stays live (link.js).
function dataError(topic, reason) {
  const el = document.getElementById("data-error");
  el.hidden = topic === null;
  if (topic === null) { delete el.dataset.topic; return; }
  el.dataset.topic = topic;
  el.textContent = `A message on ${topic} could not be shown and was skipped ` +
    `(${reason}); what it would have changed may be missing until the next one. ` +
    `${new Date().toLocaleTimeString()}`;
}

function start(config, login) {
  const params = new URLSearchParams(location.search);
  const wanted = params.get("table");
  const view = document.getElementById("view");
  const link = new Link(config.broker.url, login.username, login.password, (state, detail) => {
    banner(state, detail);
    if (window.shoedPage && window.shoedPage.onLinkState) window.shoedPage.onLinkState(state);
    if (state === "refused") {
      sessionStorage.removeItem(KEY);
      showLogin(config, `The broker refused ${login.username || "the login"}: ${detail || "not authorised"}`);
      put(view);
    }
  });
  const table = config.tables.find((t) => t.table_id === wanted) ||
    (config.tables.length === 1 ? config.tables[0] : null);
  if (table) {
    document.title = `Table ${table.table_id} \u2014 shoed console`;
    window.shoedPage = new TablePage(table.root, table.table_id, link, login.username, config, view);
  } else {
    document.title = "Pit \u2014 shoed console";
    pitPage(config, link, view);
  }
  link.onBadMessage = dataError;
  window.shoedLink = link;
  link.connect();
}

function showLogin(config, error = "") {
  const form = document.getElementById("login");
  form.hidden = false;
  document.getElementById("login-broker").textContent = `Broker ${config.broker.url}${config.broker.tls ? " (TLS)" : ""}`;
  document.getElementById("login-error").textContent = error;
  form.onsubmit = (ev) => {
    ev.preventDefault();
    const data = new FormData(form);
    const login = { username: String(data.get("username") || ""), password: String(data.get("password") || "") };
    sessionStorage.setItem(KEY, JSON.stringify(login));
    form.hidden = true;
    start(config, login);
  };
}

async function main() {
  const config = await (await fetch("/config.json", { cache: "no-store" })).json();
  // A sign-in handed over in the address's fragment (`#user=...&password=...`: the demo
  // prints such a URL for its own broker; a fragment never reaches the server): kept for
  // this tab's session, then taken out of the address bar.
  const handed = new URLSearchParams(location.hash.slice(1));
  if (handed.has("user")) {
    sessionStorage.setItem(KEY, JSON.stringify({
      username: handed.get("user") || "", password: handed.get("password") || "" }));
    history.replaceState(null, "", location.pathname + location.search);
  }
  const saved = sessionStorage.getItem(KEY);
  if (saved) start(config, JSON.parse(saved));
  else showLogin(config);
}

main();
