(function () {
  "use strict";
  var body = document.body;
  var t = Date.parse(body.getAttribute("data-time") || "");
  var limit = Number(body.getAttribute("data-stale-after")) * 1000;
  var stale = document.getElementById("stale");
  var age = document.getElementById("age");

  function fmt(ms) {
    var m = Math.floor(ms / 60000);
    if (m < 1) return "under a minute";
    if (m < 60) return m + " min";
    var h = Math.floor(m / 60);
    if (h < 48) return h + " h " + (m % 60) + " min";
    return Math.floor(h / 24) + " days";
  }

  // The page may stay open for hours: re-check the data's age.
  function tick() {
    if (isNaN(t)) return;
    var a = Date.now() - t;
    if (age) age.textContent = fmt(a);
    if (stale && a > limit) {
      var s = stale.querySelector(".age");
      if (s) s.textContent = fmt(a);
      stale.hidden = false;
    }
  }
  tick();
  setInterval(tick, 15000);

  // Filters: only free GPUs, only one user's. Kept across reloads.
  var filters = document.getElementById("filters");
  var onlyFree = document.getElementById("only-free");
  var onlyUser = document.getElementById("only-user");
  if (!filters || !onlyFree || !onlyUser) return;
  var rows = document.querySelectorAll("#users tbody tr");
  for (var i = 0; i < rows.length; i++) {
    var c = rows[i].cells;
    if (c.length < 2) continue;
    var o = document.createElement("option");
    o.value = c[0].textContent;
    o.textContent = c[0].textContent;
    onlyUser.appendChild(o);
  }
  var cells = document.querySelectorAll(".gpu");
  var hosts = document.querySelectorAll(".host");

  function users(cell) {
    var out = {};
    var tds = cell.querySelectorAll(".gpu-detail td:first-child");
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
