// statekeeper inspector: the little behaviour htmx does not cover. No inline script
// anywhere (the Content-Security-Policy forbids it); everything is wired here.
(function () {
  "use strict";

  function byId(id) { return document.getElementById(id); }

  function showSeq() {
    var slider = byId("seq-slider"), out = byId("seq-shown");
    if (slider && out) { out.textContent = slider.value; }
  }

  function travelTo(seq) {
    var slider = byId("seq-slider");
    if (!slider) { return; }
    slider.value = String(seq);
    showSeq();
    htmx.trigger(slider, "input");
    var panel = byId("travel-panel");
    if (panel) { panel.scrollIntoView({block: "start"}); }
  }

  function diffBetween(a, b) {
    var fa = byId("diff-a"), fb = byId("diff-b");
    if (!fa || !fb) { return; }
    fa.value = String(a);
    fb.value = String(b);
    htmx.trigger(fa.form, "submit");
    var target = byId("diff");
    if (target) { target.scrollIntoView({block: "start"}); }
  }

  document.addEventListener("input", function (ev) {
    if (ev.target && ev.target.id === "seq-slider") { showSeq(); }
  });

  document.addEventListener("click", function (ev) {
    var el = ev.target;
    if (!(el instanceof Element)) { return; }
    var travel = el.closest(".travel-to");
    if (travel) { travelTo(travel.getAttribute("data-seq")); return; }
    var diff = el.closest(".diff-to");
    if (diff) { diffBetween(diff.getAttribute("data-a"), diff.getAttribute("data-b")); }
  });

  function live() {
    var status = byId("live-status");
    if (!status || typeof EventSource === "undefined") { return; }
    var head = parseInt((byId("head-seq") || {}).textContent || "0", 10);
    var mark = null;  // the digest of the record at `head`, from its announcement
    var source = null;

    // the stream for what the page shows now: after live updates its head is no
    // longer the one the page was rendered with (a reconnect with the first address
    // would compare the record at that old head, not at the one shown)
    function address() {
      var url = new URL(status.getAttribute("data-live-url"), window.location.href);
      if (mark !== null) {
        url.searchParams.set("since", String(head));
        url.searchParams.set("m", mark);
        url.searchParams.delete("v");
      }
      return url.pathname + url.search;
    }

    function connect() {
      source = new EventSource(address());
      source.addEventListener("open", function () { status.classList.add("on"); status.title = "updating as events arrive"; });
      source.addEventListener("error", function () {
        status.classList.remove("on");
        status.title = "reconnecting";
        // the browser would reconnect to the first address: reconnect to the current one
        if (source.readyState === EventSource.CONNECTING) {
          source.close();
          window.setTimeout(connect, 2000);
        }
      });
      source.addEventListener("head", function (msg) {
        var parts = String(msg.data).split(" ");
        var next = parseInt(parts[0], 10);
        if (!(next > head)) { return; }
        var after = head;
        head = next;
        mark = parts[1] || null;
        var slider = byId("seq-slider");
        var following = slider && slider.value === slider.max;
        // exactly the events after+1..next: those written since come with the next
        // announcement (asked up to the head now, they would be shown twice); more than
        // a page, and the fragment ends with a row that loads the rest in its place
        var url = status.getAttribute("data-events-url") + "&after=" + after + "&to=" + next;
        htmx.ajax("GET", url, {target: "#timeline-body", swap: "afterbegin"});
        ["head-seq", "seq-max"].forEach(function (id) { var el = byId(id); if (el) { el.textContent = String(next); } });
        ["diff-a", "diff-b"].forEach(function (id) { var el = byId(id); if (el) { el.max = String(next); } });
        // the Delete form deletes the agent as the page shows it: at this head now
        var deleteHead = byId("delete-head"), deleteMark = byId("delete-mark");
        if (deleteHead && deleteMark) {
          deleteHead.value = String(next);
          deleteMark.value = parts[2] || "";
        }
        if (slider) {
          slider.max = String(next);
          if (following) { travelTo(next); }
        }
      });
      // the records were rewritten in place (a migration, a repair): the same seqs hold
      // other data, so everything shown is stale; reload, and the page says why
      source.addEventListener("rewritten", function () {
        source.close();
        status.classList.remove("on");
        status.textContent = "rewritten: reloading";
        var url = new URL(window.location.href);
        url.searchParams.set("rewritten", "1");
        window.location.replace(url.toString());
      });
    }

    connect();
    window.addEventListener("beforeunload", function () { if (source) { source.close(); } });
  }

  // the reload after a rewrite says so once: a later reload by hand does not
  function forgetRewritten() {
    var url = new URL(window.location.href);
    if (url.searchParams.has("rewritten") && window.history.replaceState) {
      url.searchParams.delete("rewritten");
      window.history.replaceState(null, "", url.toString());
    }
  }

  document.addEventListener("DOMContentLoaded", function () { showSeq(); forgetRewritten(); live(); });
})();
