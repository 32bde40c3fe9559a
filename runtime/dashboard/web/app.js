// warden serve: keeps the live parts of a page up to date. Each element
// with data-event gets the server's fragment of that name (rendered and
// escaped by the server's templates) from the stream its page names in
// data-events. What is being typed into a fragment (a deny's reason)
// stays through its replacement, and each [data-since] shows how long
// ago its time was.
"use strict";
function ages() {
  document.querySelectorAll("[data-since]").forEach(function (el) {
    var s = Math.max(0, Math.round((Date.now() - Date.parse(el.getAttribute("data-since"))) / 1000));
    el.textContent = s < 60 ? s + "s" : s < 3600 ? Math.floor(s / 60) + "m" + (s % 60) + "s" : Math.floor(s / 3600) + "h" + Math.floor(s % 3600 / 60) + "m";
  });
}
document.addEventListener("DOMContentLoaded", function () {
  setInterval(ages, 1000);
  var source = document.querySelector("[data-events]");
  if (!source || !window.EventSource) return;
  var es = new EventSource(source.getAttribute("data-events"));
  document.querySelectorAll("[data-event]").forEach(function (el) {
    es.addEventListener(el.getAttribute("data-event"), function (e) {
      var kept = {}, focused = el.contains(document.activeElement) ? document.activeElement.id : "";
      el.querySelectorAll("input[id]").forEach(function (i) { kept[i.id] = i.value; });
      el.innerHTML = e.data;
      Object.keys(kept).forEach(function (id) {
        var i = document.getElementById(id);
        if (i && el.contains(i)) i.value = kept[id];
      });
      var f = focused && document.getElementById(focused);
      if (f) f.focus();
      ages();
    });
  });
});
