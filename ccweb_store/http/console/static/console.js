// The operator console's one script: confirmations before actions, and live updates.
//
// Live: the page follows GET /events (the login cookie opens it; no token is ever in a URL)
// from the newest event id the server read before rendering the page. On every event it
// reads the same page again and swaps in its live regions ([data-live-region] elements, by
// id): the server renders all data, escaped; this script never builds HTML from data. It says
// when the stream is lost, and resumes after the last event it took.
"use strict";

(function () {
  const EVENT_TYPES = [
    "session.created", "session.updated", "message.appended",
    "run.queued", "run.started", "run.finished", "run.requeued",
    "reply.waiting", "reply.ready", "reply.returned", "reply.failed",
  ];
  const RECONNECT_MS = 1000;

  // Confirmation before a state-changing form is sent.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    const question = form.dataset.confirm;
    if (question && !window.confirm(question)) event.preventDefault();
  });

  const body = document.body;
  if (!body.dataset.eventsAfter) return;
  const status = document.getElementById("live-status");
  let lastId = body.dataset.eventsAfter;
  let source = null;
  let refreshing = false;
  let again = false;
  let reconnectTimer = null;

  function say(state, text) {
    if (!status) return;
    status.dataset.state = state;
    status.textContent = text;
  }

  // Whether the user is typing in a region: leave it alone until they are done.
  function busy(region) {
    const active = document.activeElement;
    return active !== null && region.contains(active) &&
      (active instanceof HTMLInputElement || active instanceof HTMLSelectElement) &&
      active.type !== "hidden" && active.value !== "";
  }

  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    try {
      do {
        again = false;
        const response = await fetch(window.location.href, {
          headers: { "Accept": "text/html" }, credentials: "same-origin", cache: "no-store",
        });
        if (response.redirected && new URL(response.url).pathname === "/console/login") {
          window.location.assign("/console/login");
          return;
        }
        if (!response.ok) { say("lost", "Could not read the page again (HTTP " + response.status + "); retrying on the next event"); return; }
        const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
        let deferred = false;
        for (const region of document.querySelectorAll("[data-live-region]")) {
          const replacement = fresh.getElementById(region.id);
          if (replacement === null) continue;
          if (busy(region)) { deferred = true; continue; }
          region.replaceWith(document.importNode(replacement, true));
        }
        if (deferred) document.addEventListener("focusout", refresh, { once: true });
      } while (again);
    } catch (error) {
      say("lost", "Could not read the page again; retrying on the next event");
    } finally {
      refreshing = false;
    }
  }

  function connect(after) {
    if (source !== null) source.close();
    const url = after === null ? "/events" : "/events?after=" + encodeURIComponent(after);
    source = new EventSource(url, { withCredentials: true });
    source.onopen = function () {
      say("live", "Live: following the event stream");
      refresh();
    };
    const onEvent = function (event) {
      if (event.lastEventId) lastId = event.lastEventId;
      refresh();
    };
    for (const type of EVENT_TYPES) source.addEventListener(type, onEvent);
    source.addEventListener("cut", function (event) {
      const data = JSON.parse(event.data);
      lastId = String(data.resumeAfter);
      say("lost", "The stream was cut; resuming…");
      connect(lastId);
    });
    source.addEventListener("error", function (event) {
      if (event instanceof MessageEvent && event.data) {
        // events_expired: the resume point is gone; follow from now and read everything.
        say("lost", "Missed too many events; reading everything again…");
        connect(null);
        return;
      }
      say("lost", "Lost the event stream; reconnecting…");
      if (source.readyState === EventSource.CLOSED && reconnectTimer === null) {
        reconnectTimer = window.setTimeout(function () {
          reconnectTimer = null;
          connect(lastId);
        }, RECONNECT_MS);
      }
    });
  }

  connect(lastId);
})();
