(function () {
  "use strict";
  var root = document.documentElement, body = document.body;
  function byId(id) { return document.getElementById(id); }

  // The colour scheme: automatic (the system's), or light or dark whatever
  // the system says, remembered by the browser. The dark palette is the
  // style sheet's one prefers-color-scheme rule: forcing a scheme turns
  // that rule on or off, so that each colour is written once.
  var darkRule = null;
  try {
    var rules = document.styleSheets[0].cssRules;
    for (var i = 0; i < rules.length && !darkRule; i++) {
      if (rules[i].media && /prefers-color-scheme/.test(rules[i].media.mediaText)) darkRule = rules[i];
    }
  } catch (e) { /* no style sheet to read */ }
  var autoMedia = darkRule ? darkRule.media.mediaText : "";
  var schemes = { auto: "colours: automatic", light: "colours: light", dark: "colours: dark" };
  function setScheme(m) {
    if (!schemes[m]) m = "auto";
    if (m === "auto") root.removeAttribute("data-scheme");
    else root.setAttribute("data-scheme", m);
    if (darkRule) darkRule.media.mediaText = m === "dark" ? "all" : m === "light" ? "not all" : autoMedia;
    var b = byId("scheme");
    if (b) b.textContent = schemes[m];
    return m;
  }
  var scheme = "auto";
  try { scheme = localStorage.getItem("gpumon-scheme") || "auto"; } catch (e) { /* storage off */ }
  scheme = setScheme(scheme);

  // span writes a duration as the page's Go side does (render.spanText):
  // "45 s", "12 min", "3 h 5 min", "2 d 4 h".
  function span(ms) {
    var s = Math.max(0, Math.floor(ms / 1000)), m = Math.floor(s / 60), h = Math.floor(s / 3600), d = Math.floor(s / 86400);
    if (s < 60) return s + " s";
    if (m < 60) return m + " min";
    if (h < 48) return h + " h" + (m % 60 ? " " + (m % 60) + " min" : "");
    return d + " d" + (h % 24 ? " " + (h % 24) + " h" : "");
  }
  function clock(ms) {
    var d = new Date(ms);
    return ("0" + d.getHours()).slice(-2) + ":" + ("0" + d.getMinutes()).slice(-2) + ":" + ("0" + d.getSeconds()).slice(-2);
  }

  // The data's age counts up every second; the stale banner shows when
  // the data is older than stale_after, the "stopped" one when updates
  // fail (below): the two say different things.
  function tick() {
    var t = Date.parse(body.getAttribute("data-time") || "");
    if (isNaN(t)) return;
    var a = Date.now() - t, age = byId("age"), stale = byId("stale");
    if (age) age.textContent = span(a);
    if (!stale) return;
    var s = stale.querySelector(".age");
    if (s) s.textContent = span(a);
    stale.hidden = !(a > Number(body.getAttribute("data-stale-after")) * 1000);
  }

  // Updates in place: at the refresh interval the script fetches
  // page-state.json (render's pagestate.go), which has a hash of each page.
  // When this page's differs, it fetches the page and swaps only the cards
  // whose hash (data-h) changed, parsing just their slices of the text, and
  // the frame (summary, warnings, users, history) when the body's data-h
  // changed. Untouched cards keep their nodes, the scroll and the filters.
  var stateURL = body.getAttribute("data-state");
  var every = Number(body.getAttribute("data-refresh")) * 1000;
  var due = Date.now() + every, busy = false, fails = 0, failedSince = 0;
  // the page's "reloads every" is its own without scripts
  function everyText() {
    var e = byId("every");
    if (e && stateURL && every && location.protocol !== "file:") e.textContent = "updates in place every " + span(every);
  }
  everyText();

  // no-store, not no-cache: a revalidation is answered by the file's time
  // to the second (Last-Modified), and two renders in one second would
  // leave the page with the first one's text while the state has the
  // second's
  function get(url, json) {
    return fetch(url, { cache: "no-store", credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error(url.replace(/^.*\//, "") + " answered HTTP " + r.status);
      return json ? r.json() : r.text();
    });
  }

  function update() {
    return get(stateURL, true).then(function (s) {
      if (!s || s.v !== 1 || !s.pages) throw new Error("page-state.json is not one this page reads");
      if (s.build && s.build !== body.getAttribute("data-build") && !reloadedFor(s.build)) {
        location.reload(); // a new gpumon: its script and style sheet
        return;
      }
      var mine = s.pages[body.getAttribute("data-page")];
      if (mine === undefined) throw new Error("this page is no longer made (page-state.json does not list it)");
      if (mine === body.getAttribute("data-v")) return;
      return get(location.href.split("#")[0], false).then(swap);
    });
  }

  // reloadedFor reports whether this tab reloaded for the build already,
  // and notes that it does now: a page and a state of two builds (two
  // gpumons writing one folder) must not reload the page at every refresh.
  function reloadedFor(build) {
    try {
      if (sessionStorage.getItem("gpumon-build") === build) return true;
      sessionStorage.setItem("gpumon-build", build);
      return false;
    } catch (e) { return true; } // nowhere to note it: never reload
  }

  function poll(now) {
    if (!stateURL || !every || busy || document.hidden || Date.now() < due && !now) return;
    if (location.protocol === "file:") { location.reload(); return; } // no fetch from a file
    busy = true;
    due = Date.now() + every;
    update().then(function () {
      fails = 0;
      byId("stopped").hidden = true;
    }, function (err) {
      if (!fails++) failedSince = Date.now();
      if (fails >= 3) {
        var p = byId("stopped");
        p.textContent = "⚠ Updates stopped: " + (err && err.message || err) + " (" + fails + " tries since " +
          clock(failedSince) + "). The page shows the data it last had.";
        p.hidden = false;
      }
    }).then(function () { busy = false; });
  }

  tick();
  setInterval(function () { tick(); poll(false); }, 1000);
  document.addEventListener("visibilitychange", function () { if (!document.hidden) poll(false); });

  var MARK = "<section class=host data-h=";
  var HASH = 8; // render's hashLen

  // cardsIn lists the cards in text between from and to, in order: each
  // one's hash and where its markup lies. Host text cannot make a marker:
  // every "<" from a host is escaped.
  function cardsIn(text, from, to) {
    var out = [], at = text.indexOf(MARK, from);
    while (at >= 0 && at < to) {
      var next = text.indexOf(MARK, at + MARK.length);
      out.push({ h: text.substr(at + MARK.length, HASH), at: at, end: next < 0 || next > to ? to : next });
      at = next;
    }
    return out;
  }

  function swap(text) {
    var main = byId("hosts") || byId("overview");
    // the first of each is the page's: this script, which has them too,
    // comes after the cards, and no host text can make one (its "<" is
    // escaped)
    var open = text.indexOf("<main id=\"" + main.id + "\""), openEnd = text.indexOf(">", open) + 1;
    var end = text.indexOf("</main>", openEnd);
    if (open < 0 || end < openEnd) { location.reload(); return; } // the page changed its kind
    var overview = main.id === "overview";
    // the frame alone (with the overview's boxes: it has no cards)
    var frame = overview ? text : text.slice(0, openEnd) + text.slice(end);
    var doc = null;
    if (frameHashIn(text) !== body.getAttribute("data-h")) {
      doc = new DOMParser().parseFromString(frame, "text/html");
      swapFrame(doc, main, overview);
    }
    if (!overview) swapCards(text, cardsIn(text, openEnd, end), main);
    body.setAttribute("data-v", bodyAttr(text, "data-v"));
    tick();
    if (doc) scrollables(); // a layout: only when the tables changed
    if (filters && q) filtersChanged();
  }

  // bodyAttr reads one of the body's attributes from the page's text; the
  // page's template quotes them.
  function bodyAttr(text, name) {
    var b = text.indexOf("<body"), at = text.indexOf(" " + name + "=\"", b), stop = text.indexOf(">", b);
    if (b < 0 || at < 0 || at > stop) return "";
    at += name.length + 3;
    return text.slice(at, text.indexOf("\"", at));
  }
  function frameHashIn(text) { return bodyAttr(text, "data-h"); }

  // swapFrame puts the fetched page's frame in place of this one's: the
  // body's attributes, what is before the cards and after them. The
  // filters and the banners this script writes stay.
  var KEEP = { filters: true, stale: true, stopped: true };
  function swapFrame(doc, main, overview) {
    var nb = doc.body, nm = doc.getElementById(main.id);
    if (!nm) return;
    // data-v last (swap): a swap cut short is tried again
    for (var i = 0; i < nb.attributes.length; i++) {
      if (nb.attributes[i].name !== "data-v") body.setAttribute(nb.attributes[i].name, nb.attributes[i].value);
    }
    for (var j = 0; j < nm.attributes.length; j++) main.setAttribute(nm.attributes[j].name, nm.attributes[j].value);
    document.title = doc.title;
    var script = body.querySelector("script");
    var mine = Array.prototype.slice.call(body.children);
    mine.forEach(function (n) { if (n !== main && n !== script && !KEEP[n.id]) n.remove(); });
    var before = true;
    Array.prototype.slice.call(nb.children).forEach(function (n) {
      if (n === nm) { before = false; return; }
      if (n.tagName === "SCRIPT") return;
      var node = KEEP[n.id] && byId(n.id) || document.adoptNode(n);
      body.insertBefore(node, before ? main : script);
    });
    if (overview) main.replaceChildren.apply(main, Array.prototype.slice.call(nm.childNodes).map(function (n) { return document.adoptNode(n); }));
    if (filters && q) fillUsers();
    everyText();
  }

  // swapCards makes main's cards those of list, in its order: a card whose
  // hash is on the page already keeps its node; the others are parsed
  // from their slices of text, all in one go. A swapped card that held the
  // focus gives it to its new node's GPU of the same index.
  function swapCards(text, list, main) {
    // A hash on two cards (a host's text made to collide with another
    // card's: CRCs are not hard to forge) names neither: both are parsed
    // anew, or one node would stand for two hosts.
    var old = {}, twice = {}, count = {};
    for (var c = main.firstElementChild; c; c = c.nextElementSibling) {
      var ch = c.getAttribute("data-h");
      if (old[ch]) twice[ch] = true;
      old[ch] = c;
    }
    list.forEach(function (l) { count[l.h] = (count[l.h] || 0) + 1; });
    function kept(l) { return count[l.h] === 1 && !twice[l.h] && old[l.h]; }
    var slices = [];
    list.forEach(function (l) { if (!kept(l)) slices.push(text.slice(l.at, l.end)); });
    if (!slices.length && list.length === main.children.length) return;
    var fresh = [];
    if (slices.length) {
      var tpl = document.createElement("template");
      tpl.innerHTML = slices.join("");
      fresh = Array.prototype.slice.call(tpl.content.children);
    }
    var active = document.activeElement, held = null;
    if (active && active !== body && main.contains(active)) {
      var cell = active.closest(".gpu"), card = active.closest(".host");
      held = { host: card.getAttribute("data-host"), gpu: cell && cell.getAttribute("data-gpu"), shut: cell && cell.classList.contains("shut") };
    }
    var k = 0, keep = new Set();
    var nodes = list.map(function (l) { var n = kept(l) || fresh[k++]; keep.add(n); return n; });
    Array.prototype.slice.call(main.children).forEach(function (n) { if (!keep.has(n)) n.remove(); });
    var at = main.firstElementChild;
    nodes.forEach(function (n) {
      if (n === at) at = at.nextElementSibling;
      else main.insertBefore(n, at);
    });
    if (held && !main.contains(active)) refocus(main, held);
  }

  function refocus(main, held) {
    var card = Array.prototype.find.call(main.children, function (c) { return c.getAttribute("data-host") === held.host; });
    if (!card) return;
    var cell = held.gpu !== null && Array.prototype.find.call(card.querySelectorAll(".gpu"), function (g) {
      return g.getAttribute("data-gpu") === held.gpu;
    }) || card.querySelector(".gpu");
    if (!cell) return;
    if (held.shut) cell.classList.add("shut");
    cell.focus({ preventScroll: true });
  }

  // A cell's detail shows on hover, focus or tap (the style sheet). Here it
  // gets a title naming its host and GPU (on a phone it is a sheet at the
  // bottom of the screen, away from the cell) and a close button for
  // touch, and it is moved left, or above the cell, where it would leave
  // the window. Escape closes it and leaves the focus on the cell.
  function title(cell, d) {
    if (d.firstChild && d.firstChild.className === "t") return;
    var card = cell.closest(".host"), h2 = card && card.querySelector("h2");
    var name = h2 && h2.firstChild ? h2.firstChild.textContent.trim() : "";
    var gpu = cell.getAttribute("data-gpu");
    var t = document.createElement("p");
    t.className = "t";
    t.textContent = name + (gpu ? " · GPU " + gpu : "");
    var x = document.createElement("button");
    x.type = "button";
    x.className = "close";
    x.tabIndex = -1; // the keyboard has Escape
    x.textContent = "×";
    x.setAttribute("aria-label", "close");
    d.insertBefore(x, d.firstChild);
    d.insertBefore(t, d.firstChild);
  }

  // spark draws the GPU's utilization over the last 24 hours into its
  // detail, from its card's data-util (render's utilAlphabet: two hours a
  // character, each 0 for unknown or 1 + its level in fifths; a character
  // from the 50th on repeats the one before).
  var A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  var NS = "http://www.w3.org/2000/svg";
  function spark(cell, d) {
    if (cell.classList.contains("w") || d.querySelector(".spark")) return;
    var card = cell.closest(".host"), u = card && card.getAttribute("data-util");
    if (!u) return;
    var cells = card.querySelectorAll(".gpu:not(.w)");
    var s = u.split(".")[Array.prototype.indexOf.call(cells, cell)];
    if (!s) return;
    var m = byId("hosts"), hours = Number(m.getAttribute("data-util-hours")) || 24;
    var pts = [], last = -1;
    for (var k = 0; k < s.length; k++) {
      var c = A.indexOf(s.charAt(k));
      if (c < 0) return;
      for (var n = c >= 49 ? c - 48 : 1; n > 0; n--) {
        if (c >= 49) c = last;
        if (c < 0) return;
        pts.push(Math.floor(c / 7), c % 7);
      }
      last = c;
    }
    while (pts.length < hours) pts.push(0);
    pts.length = hours;
    var svg = document.createElementNS(NS, "svg"), bw = 8, H = 30;
    svg.setAttribute("class", "spark");
    svg.setAttribute("width", pts.length * bw);
    svg.setAttribute("height", H + 2);
    var sum = 0, cnt = 0, top = 0, unknown = 0;
    pts.forEach(function (p, i) {
      var r = document.createElementNS(NS, "rect");
      r.setAttribute("x", i * bw + 1);
      r.setAttribute("width", bw - 2);
      if (p === 0) { // unknown: a dashed outline, not a bar
        unknown++;
        r.setAttribute("class", "q");
        r.setAttribute("y", H - 6);
        r.setAttribute("height", 6);
      } else {
        var h = 1 + (p - 1) / 5 * (H - 1);
        r.setAttribute("y", H + 1 - h);
        r.setAttribute("height", h);
        sum += (p - 1) / 5 * 100;
        cnt++;
        top = Math.max(top, (p - 1) / 5 * 100);
      }
      svg.appendChild(r);
    });
    var text = "utilization per hour, " + (m.getAttribute("data-util-from") || "") + " to " +
      (m.getAttribute("data-util-to") || "") + (cnt ? ": mean " + Math.round(sum / cnt) + "%, peak " + Math.round(top) + "%" : "") +
      (unknown ? "; " + unknown + " h unknown (dashed)" : "");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", text);
    var p = document.createElement("p");
    p.className = "n";
    p.textContent = text;
    var t = d.querySelector("table");
    d.insertBefore(p, t);
    d.insertBefore(svg, t);
  }

  function place(cell) {
    var d = cell.querySelector(":scope > aside");
    if (!d) return;
    title(cell, d);
    spark(cell, d);
    var s = d.style;
    s.left = s.top = s.bottom = s.maxHeight = "";
    if (getComputedStyle(d).position === "fixed") return; // the phone's sheet
    var r = d.getBoundingClientRect();
    if (!r.width) return; // not shown
    var m = 4, W = document.documentElement.clientWidth, H = innerHeight;
    if (r.right > W - m) s.left = -Math.min(r.right - (W - m), r.left - m) + "px";
    if (r.bottom > H - m) {
      var c = cell.getBoundingClientRect(), above = c.top - m, below = H - c.bottom - m;
      if (above > below) {
        s.top = "auto";
        s.bottom = "100%";
        if (r.height > above) s.maxHeight = above + "px";
      } else {
        s.maxHeight = below + "px";
      }
    }
  }

  // A table or plot that scrolls sideways (a phone) takes the focus, so
  // that the keyboard can scroll it too.
  function scrollables() {
    var s = document.querySelectorAll("#users,#idleheld,.plot");
    for (var i = 0; i < s.length; i++) {
      if (s[i].scrollWidth > s[i].clientWidth + 1) s[i].tabIndex = 0;
      else s[i].removeAttribute("tabindex");
    }
  }
  scrollables();
  addEventListener("resize", scrollables);

  var hostsMain = byId("hosts");
  if (hostsMain) {
    // entering a cell from outside it opens its detail again
    hostsMain.addEventListener("mouseover", function (e) {
      var cell = e.target.closest && e.target.closest(".gpu");
      if (cell && !cell.contains(e.relatedTarget)) {
        cell.classList.remove("shut");
        place(cell);
      }
    });
    hostsMain.addEventListener("focusin", function (e) {
      var cell = e.target.closest && e.target.closest(".gpu");
      if (!cell) return;
      if (!cell.contains(e.relatedTarget)) cell.classList.remove("shut");
      place(cell);
    });
    hostsMain.addEventListener("click", function (e) {
      if (!e.target.classList.contains("close")) return;
      var cell = e.target.closest(".gpu");
      cell.classList.add("shut");
      if (cell.contains(document.activeElement)) document.activeElement.blur();
    });
    document.addEventListener("keydown", function (e) {
      if (e.key !== "Escape" && e.key !== "Esc") return;
      var a = document.activeElement, cell = a && a.closest && a.closest(".gpu");
      if (cell) {
        cell.classList.add("shut");
        if (a !== cell) cell.focus();
      }
      var hovered = hostsMain.querySelectorAll(".gpu:hover");
      for (var i = 0; i < hovered.length; i++) hovered[i].classList.add("shut");
    });
  }

  // Filters: a search over what the cells and cards say (hosts, users,
  // models, states, jobs, containers, commands), only free GPUs, one
  // user's. They live in the fragment (#user=alice&state=free&q=a100), so
  // that a filter is a link; a fragment without "=" is an anchor (#idle,
  // #gpu0001) and is left alone. The overview has a host search only.
  var filters = byId("filters"), q = byId("q"), onlyFree = byId("only-free"), onlyUser = byId("only-user");
  var shown = byId("shown"), schemeButton = byId("scheme");
  if (schemeButton) {
    schemeButton.addEventListener("click", function () {
      scheme = setScheme({ auto: "light", light: "dark", dark: "auto" }[scheme]);
      try { localStorage.setItem("gpumon-scheme", scheme); } catch (e) { /* not kept */ }
    });
    setScheme(scheme);
  }
  if (!filters || !q) return;
  var state = "";

  function fillUsers() {
    if (!onlyUser) return;
    var keep = onlyUser.value;
    while (onlyUser.options.length > 1) onlyUser.remove(1);
    var rows = document.querySelectorAll("#users tbody tr");
    for (var i = 0; i < rows.length; i++) {
      var c = rows[i].cells;
      // not the "nobody" row, nor those who hold no GPU now
      if (c.length < 2 || rows[i].classList.contains("past")) continue;
      onlyUser.appendChild(new Option(c[0].textContent, c[0].textContent));
    }
    setUser(keep);
  }
  // setUser selects a user, one the table does not list too (a link to a
  // user's GPUs while they hold none)
  function setUser(u) {
    if (!onlyUser) return;
    if (u && !Array.prototype.some.call(onlyUser.options, function (o) { return o.value === u; })) onlyUser.appendChild(new Option(u, u));
    onlyUser.value = u;
  }

  function readFragment() {
    if (location.hash.indexOf("=") < 0) return false;
    var p = new URLSearchParams(location.hash.slice(1));
    q.value = p.get("q") || "";
    state = p.get("state") || "";
    if (onlyFree) onlyFree.checked = state === "free";
    setUser(p.get("user") || "");
    return true;
  }

  function writeFragment() {
    var p = new URLSearchParams();
    var user = onlyUser ? onlyUser.value : "";
    if (user) p.set("user", user);
    if (state) p.set("state", state);
    if (q.value.trim()) p.set("q", q.value.trim());
    var s = p.toString();
    if (!s && location.hash.indexOf("=") < 0) return; // an anchor, or nothing
    history.replaceState(history.state, "", s ? "#" + s : location.pathname + location.search);
  }

  // what a cell and a card say, lower case, kept by node: a card swapped
  // in is new and read anew
  var said = new WeakMap();
  function words(n, extra) {
    var w = said.get(n);
    if (w === undefined) {
      w = (extra(n) + " " + n.textContent).toLowerCase();
      said.set(n, w);
    }
    return w;
  }
  function cardWords(card) {
    return words(card, function (c) {
      var h = c.querySelector("h2"), s = c.querySelectorAll(".hs,.hn");
      var t = c.getAttribute("data-host") + " " + (h ? h.textContent : "");
      for (var i = 0; i < s.length; i++) t += " " + s[i].textContent;
      return t;
    });
  }
  function cellWords(cell) {
    return words(cell, function (c) { return (c.getAttribute("data-gpu") || "") + " " + c.getAttribute("data-state"); });
  }
  var usersOf = new WeakMap();
  function holds(cell, who) {
    var u = usersOf.get(cell);
    if (!u) {
      u = {};
      var tds = cell.querySelectorAll("aside tr > td:first-child");
      for (var j = 0; j < tds.length; j++) u[tds[j].textContent] = true;
      usersOf.set(cell, u);
    }
    return u[who];
  }

  var filtered = false; // whether a filter hides anything now
  function apply() {
    var terms = q.value.toLowerCase().split(/\s+/).filter(Boolean);
    var who = onlyUser ? onlyUser.value : "";
    var on = terms.length > 0 || !!state || !!who, n = 0, all = 0;
    if (!on && !filtered) { // nothing to show again: 8,000 cells untouched
      shown.textContent = "";
      writeFragment();
      return;
    }
    filtered = on;
    if (hostsMain) {
      for (var card = hostsMain.firstElementChild; card; card = card.nextElementSibling) {
        var cw = terms.length ? cardWords(card) : "", any = false, cells = card.querySelectorAll(".gpu");
        for (var j = 0; j < cells.length; j++) {
          var c = cells[j];
          var show = !on || (!state || c.getAttribute("data-state") === state) && (!who || holds(c, who)) &&
            terms.every(function (t) { return cw.indexOf(t) >= 0 || cellWords(c).indexOf(t) >= 0; });
          c.classList.toggle("off", !show);
          any = any || show;
          if (!c.classList.contains("w")) { all++; if (show) n++; }
        }
        card.classList.toggle("off", on && !any);
      }
      shown.textContent = on ? n + " of " + all + " GPUs shown" : "";
    } else {
      var boxes = document.querySelectorAll("#overview .ck > [title]");
      for (var b = 0; b < boxes.length; b++) {
        var t = boxes[b].getAttribute("title").toLowerCase(), hit = terms.every(function (x) { return t.indexOf(x) >= 0; });
        boxes[b].classList.toggle("dim", on && !hit);
        if (on && hit) n++;
      }
      shown.textContent = on ? n + " of " + boxes.length + " hosts match" : "";
    }
    writeFragment();
  }

  var timer = 0;
  function filtersChanged() {
    clearTimeout(timer);
    apply();
  }
  readFragment();
  fillUsers();
  q.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(apply, 150); });
  if (onlyFree) onlyFree.addEventListener("change", function () { state = onlyFree.checked ? "free" : ""; apply(); });
  if (onlyUser) onlyUser.addEventListener("change", apply);
  window.addEventListener("hashchange", function () { if (readFragment()) apply(); });
  filters.hidden = false;
  apply();
})();
