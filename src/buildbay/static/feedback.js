// The "Send feedback" form (templates/_feedback_form.html): what the device says of itself, as
// the `context` field's JSON. The form works without this script (the server then notes the
// browser's user agent and language only).
(function () {
  "use strict";
  function describe() {
    var context = {
      userAgent: navigator.userAgent,
      language: navigator.language,
      screen: { width: screen.width, height: screen.height, pixelRatio: window.devicePixelRatio || 1 },
      viewport: { width: window.innerWidth, height: window.innerHeight }
    };
    try {
      context.timeZone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    } catch (e) { /* an old browser: without it */ }
    return JSON.stringify(context);
  }
  function start() {
    var fields = document.querySelectorAll("form[data-feedback] input[data-device-context]");
    for (var i = 0; i < fields.length; i++) {
      fields[i].value = describe();
    }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
