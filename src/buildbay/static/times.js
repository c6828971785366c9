// Times in the reader's own time zone. The server writes each moment as
// <time datetime="2025-03-12T14:03:00Z">12 Mar 2025, 14:03 UTC</time>, which is what a page
// reads without script; this rewrites it in the browser's time zone and language (as a local
// time reads: without the zone's name, which would widen every table), and keeps the UTC time
// as its title (shown on hover).
"use strict";

(() => {
  const format = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
  });
  for (const element of document.querySelectorAll("time[datetime]")) {
    const written = element.getAttribute("datetime");
    if (!written.includes("T")) continue; // a date alone has no time zone to convert
    const moment = new Date(written);
    if (Number.isNaN(moment.getTime())) continue;
    if (!element.title) element.title = element.textContent.trim();
    element.textContent = format.format(moment);
  }
})();
