(function () {
  "use strict";
  var body = document.body;
  var t = Date.parse(body.getAttribute("data-time") || "");
  var limit = Number(body.getAttribute("data-stale-after")) * 1000;
  var stale = document.getElementById("stale");
  var age = document.getElementById("age");

  // span writes a duration as the page's Go side does (render.spanText):
  // "45 s", "12 min", "3 h 5 min", "2 d 4 h".
  function span(ms) {
    var s = Math.max(0, Math.floor(ms / 1000)), m = Math.floor(s / 60), h = Math.floor(s / 3600), d = Math.floor(s / 86400);
    if (s < 60) return s + " s";
    if (m < 60) return m + " min";
    if (h < 48) return h + " h" + (m % 60 ? " " + (m % 60) + " min" : "");
    return d + " d" + (h % 24 ? " " + (h % 24) + " h" : "");
  }

  // The page may stay open for hours: re-check the data's age.
  function tick() {
    if (isNaN(t)) return;
    var a = Date.now() - t;
    if (age) age.textContent = span(a);
    if (stale && a > limit) {
      var s = stale.querySelector(".age");
      if (s) s.textContent = span(a);
      stale.hidden = false;
    }
  }
  tick();
  setInterval(tick, 15000);

  // A cell's detail shows on hover, focus or tap (the style sheet). Here it
  // gets a title naming its host and GPU (on a phone it is a sheet at the
  // bottom of the screen, away from the cell), and it is moved left, or
  // above the cell, where it would leave the window.
  function title(cell, d) {
    if (d.firstChild && d.firstChild.className === "t") return;
    var card = cell.closest(".host"), h2 = card && card.querySelector("h2");
    var name = h2 && h2.firstChild ? h2.firstChild.textContent.trim() : "";
    var gpu = cell.getAttribute("data-gpu");
    var t = document.createElement("p");
    t.className = "t";
    t.textContent = name + (gpu ? " · GPU " + gpu : "");
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
    var m = document.getElementById("hosts"), hours = Number(m.getAttribute("data-util-hours")) || 24;
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
    var sum = 0, n = 0, top = 0, unknown = 0;
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
        n++;
        top = Math.max(top, (p - 1) / 5 * 100);
      }
      svg.appendChild(r);
    });
    var text = "utilization per hour, " + (m.getAttribute("data-util-from") || "") + " to " +
      (m.getAttribute("data-util-to") || "") + (n ? ": mean " + Math.round(sum / n) + "%, peak " + Math.round(top) + "%" : "") +
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

  var main = document.getElementById("hosts");
  if (main) {
    main.addEventListener("mouseover", function (e) {
      var cell = e.target.closest && e.target.closest(".gpu");
      if (cell && !cell.contains(e.relatedTarget)) place(cell);
    });
    main.addEventListener("focusin", function (e) {
      var cell = e.target.closest && e.target.closest(".gpu");
      if (cell) place(cell);
    });
  }

  // Filters: only free GPUs, only one user's. Kept across reloads.
  var filters = document.getElementById("filters");
  var onlyFree = document.getElementById("only-free");
  var onlyUser = document.getElementById("only-user");
  if (!filters || !onlyFree || !onlyUser) return;
  var rows = document.querySelectorAll("#users tbody tr");
  for (var i = 0; i < rows.length; i++) {
    var c = rows[i].cells;
    // not the "nobody" row, nor those who hold no GPU now
    if (c.length < 2 || rows[i].classList.contains("past")) continue;
    var o = document.createElement("option");
    o.value = c[0].textContent;
    o.textContent = c[0].textContent;
    onlyUser.appendChild(o);
  }
  var cells = document.querySelectorAll(".gpu");
  var hosts = document.querySelectorAll(".host");

  function users(cell) {
    var out = {};
    var tds = cell.querySelectorAll("aside tr > td:first-child");
    for (var j = 0; j < tds.length; j++) out[tds[j].textContent] = true;
    return out;
  }

  function apply() {
    var free = onlyFree.checked, who = onlyUser.value;
    for (var j = 0; j < cells.length; j++) {
      var c = cells[j];
      var show = (!free || c.getAttribute("data-state") === "free") && (!who || users(c)[who]);
      c.classList.toggle("off", !show);
    }
    for (var k = 0; k < hosts.length; k++) {
      var h = hosts[k];
      h.classList.toggle("off", (free || who) && !h.querySelector(".gpu:not(.off)"));
    }
    try {
      sessionStorage.setItem("gpumon-filter", JSON.stringify({ free: free, user: who }));
    } catch (e) { /* storage off: filters are not kept */ }
  }

  try {
    var saved = JSON.parse(sessionStorage.getItem("gpumon-filter") || "null");
    if (saved) {
      onlyFree.checked = !!saved.free;
      if (saved.user) onlyUser.value = saved.user;
    }
  } catch (e) { /* nothing saved */ }
  onlyFree.addEventListener("change", apply);
  onlyUser.addEventListener("change", apply);
  filters.hidden = false;
  apply();
})();
