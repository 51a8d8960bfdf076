// The operator console's one script: the login's key, confirmations before actions, and live
// updates.
//
// Key: the login redirects to an address whose fragment holds the login's key (the browser
// never sends a fragment). It is kept in localStorage, which belongs to this origin alone
// (scheme, host and port), and goes with every request the page makes: a header on its reads
// and on the event stream, a field in every form it posts. The login cookie alone opens only
// a page's empty frame (data-live-shell), which this script fills by reading the page again
// with the key.
//
// Live: the page follows GET /events (read with fetch, so the key goes in a header) from the
// newest event id the server read before rendering the page. Events mark the page stale; it
// is read again at most once a second however many events come (REFRESH_MS), and its live
// regions ([data-live-region] elements, by id) are swapped in: the server renders all data,
// escaped; this script never builds HTML from data. It says when the stream is lost, and
// resumes after the last event it took.
"use strict";

(function () {
  const EVENT_TYPES = [
    "session.created", "session.updated", "message.appended",
    "run.queued", "run.started", "run.finished", "run.requeued",
    "reply.waiting", "reply.ready", "reply.returned", "reply.failed",
  ];
  const KEY_STORE = "ccweb-console-key";
  const KEY_HEADER = "X-CCWeb-Console-Key";
  const KEY_FIELD = "consoleKey";
  const REFRESH_MS = 1000;
  const RECONNECT_MS = 1000;

  const fragment = new URLSearchParams(window.location.hash.slice(1));
  if (fragment.has("key")) {
    window.localStorage.setItem(KEY_STORE, fragment.get("key"));
    window.history.replaceState(null, "", window.location.pathname + window.location.search);
  }
  const key = window.localStorage.getItem(KEY_STORE);
  const keyed = key ? { [KEY_HEADER]: key } : {};

  // Confirmation before a state-changing form is sent; the key goes with every POST.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    const question = form.dataset.confirm;
    if (question && !window.confirm(question)) { event.preventDefault(); return; }
    if (form.method.toLowerCase() !== "post") return;
    if (new URL(form.action).pathname === "/console/logout") {
      window.localStorage.removeItem(KEY_STORE);
      return;
    }
    if (key && form.elements.namedItem(KEY_FIELD) === null) {
      const field = document.createElement("input");
      field.type = "hidden";
      field.name = KEY_FIELD;
      field.value = key;
      form.appendChild(field);
    }
  });

  const body = document.body;
  const status = document.getElementById("live-status");
  let lastId = null;
  let stream = null;
  let reconnectTimer = null;
  let refreshing = false;
  let stale = false;
  let refreshTimer = null;
  let lastRefresh = -Infinity;
  let opened = false;

  function say(state, text) {
    if (!status) return;
    status.dataset.state = state;
    status.textContent = text;
  }

  function isShell(root) {
    const main = root.getElementById("console-main");
    return main !== null && main.hasAttribute("data-live-shell");
  }

  function noKey() {
    const loading = document.getElementById("shell-loading");
    const missing = document.getElementById("shell-no-key");
    if (loading) loading.hidden = true;
    if (missing) missing.hidden = false;
    say("lost", "Not following: this browser holds no key for this console");
  }

  // The page read again with the key, parsed; null when the login is gone.
  async function readPage() {
    const response = await fetch(window.location.href, {
      headers: { "Accept": "text/html", ...keyed }, credentials: "same-origin", cache: "no-store",
    });
    if (response.redirected && new URL(response.url).pathname === "/console/login") {
      window.location.assign("/console/login");
      return null;
    }
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    return { response: response, fresh: fresh };
  }

  // Whether the user is typing in a region: leave it alone until they are done.
  function busy(region) {
    const active = document.activeElement;
    return active !== null && region.contains(active) &&
      (active instanceof HTMLInputElement || active instanceof HTMLSelectElement) &&
      active.type !== "hidden" && active.value !== "";
  }

  async function refresh() {
    const page = await readPage();
    if (page === null) return;
    if (!page.response.ok) {
      say("lost", "Could not read the page again (HTTP " + page.response.status + "); retrying on the next event");
      return;
    }
    if (isShell(page.fresh)) { noKey(); return; }
    let deferred = false;
    for (const region of document.querySelectorAll("[data-live-region]")) {
      const replacement = page.fresh.getElementById(region.id);
      if (replacement === null) continue;
      if (busy(region)) { deferred = true; continue; }
      region.replaceWith(document.importNode(replacement, true));
    }
    if (deferred) document.addEventListener("focusout", markStale, { once: true });
  }

  // An event came: read the page again now, or a second after the last read began.
  function markStale() {
    stale = true;
    if (refreshing || refreshTimer !== null) return;
    const wait = Math.max(0, lastRefresh + REFRESH_MS - Date.now());
    refreshTimer = window.setTimeout(runRefresh, wait);
  }

  async function runRefresh() {
    refreshTimer = null;
    if (!stale) return;
    stale = false;
    refreshing = true;
    lastRefresh = Date.now();
    try {
      await refresh();
    } catch (error) {
      say("lost", "Could not read the page again; retrying on the next event");
    } finally {
      refreshing = false;
      if (stale) markStale();
    }
  }

  // A page without its data: read it with the key, put it in place, then follow.
  async function fill() {
    if (!key) { noKey(); return; }
    const page = await readPage();
    if (page === null) return;
    if (isShell(page.fresh)) { noKey(); return; }
    const main = page.fresh.getElementById("console-main");
    if (main === null) return;
    document.getElementById("console-main").replaceWith(document.importNode(main, true));
    document.title = page.fresh.title;
    for (const name of ["eventsAfter", "conversation"]) {
      if (page.fresh.body.dataset[name] !== undefined) body.dataset[name] = page.fresh.body.dataset[name];
    }
    if (body.dataset.eventsAfter) connect(body.dataset.eventsAfter);
    else say("lost", "Not following: this page has nothing live");
  }

  function lost() {
    say("lost", "Lost the event stream; reconnecting…");
    if (reconnectTimer === null) {
      reconnectTimer = window.setTimeout(function () {
        reconnectTimer = null;
        connect(lastId);
      }, RECONNECT_MS);
    }
  }

  function connect(after) {
    if (stream !== null) stream.abort();
    stream = new AbortController();
    lastId = after;
    const query = new URLSearchParams();
    if (after !== null) query.set("after", after);
    if (body.dataset.conversation) query.set("conversation", body.dataset.conversation);
    follow("/events?" + query.toString(), stream.signal);
  }

  // Reads the stream until it ends; an event of interest marks the page stale.
  async function follow(url, signal) {
    let response;
    try {
      response = await fetch(url, {
        headers: { "Accept": "text/event-stream", ...keyed },
        credentials: "same-origin", cache: "no-store", signal: signal,
      });
    } catch (error) {
      if (!signal.aborted) lost();
      return;
    }
    if (response.status === 401) {
      say("lost", "Not following: the login ended; reload the page to log in again");
      return;
    }
    if (!response.ok || response.body === null) { lost(); return; }
    say("live", "Live: following the event stream");
    if (opened || lastId === null) markStale();  // the stream resumes after the page's read
    opened = true;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let event = {};
    try {
      for (;;) {
        const chunk = await reader.read();
        if (chunk.done) break;
        buffer += chunk.value;
        let end;
        while ((end = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, end).replace(/\r$/, "");
          buffer = buffer.slice(end + 1);
          if (line === "") {
            if (dispatch(event)) return;
            event = {};
          } else if (!line.startsWith(":")) {
            const colon = line.indexOf(":");
            const field = colon < 0 ? line : line.slice(0, colon);
            const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
            if (field === "data") event.data = event.data === undefined ? value : event.data + "\n" + value;
            else if (field === "event") event.type = value;
            else if (field === "id") event.id = value;
          }
        }
      }
    } catch (error) {
      if (signal.aborted) return;
    }
    if (!signal.aborted) lost();
  }

  // One event of the stream; true when it ended this stream (another one follows).
  function dispatch(event) {
    if (event.id) lastId = event.id;
    if (event.type === "cut") {
      say("lost", "The stream was cut; resuming…");
      connect(String(JSON.parse(event.data).resumeAfter));
      return true;
    }
    if (event.type === "error") {
      // events_expired: the resume point is gone; follow from now and read everything.
      say("lost", "Missed too many events; reading everything again…");
      connect(null);
      return true;
    }
    if (EVENT_TYPES.includes(event.type)) markStale();
    return false;
  }

  if (isShell(document)) {
    fill().catch(function () { say("lost", "Could not read the page; reload it to try again"); });
  } else if (body.dataset.eventsAfter) {
    connect(body.dataset.eventsAfter);
  }
})();
