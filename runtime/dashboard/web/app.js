// warden serve: keeps the live parts of a page up to date. Each element
// with data-event gets the server's fragment of that name (rendered and
// escaped by the server's templates) from the stream its page names in
// data-events.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var source = document.querySelector("[data-events]");
  if (!source || !window.EventSource) return;
  var es = new EventSource(source.getAttribute("data-events"));
  document.querySelectorAll("[data-event]").forEach(function (el) {
    es.addEventListener(el.getAttribute("data-event"), function (e) {
      el.innerHTML = e.data;
    });
  });
});
