// Buildbay web console: a few lines of plain JavaScript, no framework, no build step.
"use strict";

// Copy buttons: data-copy holds the text.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button.copy");
  if (!button) return;
  try {
    await navigator.clipboard.writeText(button.dataset.copy);
    button.textContent = "Copied";
    button.setAttribute("aria-live", "polite");
  } catch {
    window.prompt("Copy this:", button.dataset.copy);
  }
});

// Forms that destroy something ask first: data-confirm holds the question.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});

// A test event's outcome: the page says "Sending..." until the first attempt is made, and asks
// the console for it meanwhile, so that it appears without a reload (without JavaScript, a
// reload shows it). It asks less often as time goes by, and stops after about two minutes.
const outcome = document.querySelector("[data-outcome]");
if (outcome && outcome.dataset.known !== "true") {
  const shown = outcome.querySelector(".outcome-text");
  const hint = outcome.querySelector(".outcome-hint");
  if (hint) hint.hidden = true;
  let asked = 0;
  const ask = async () => {
    asked += 1;
    try {
      const response = await fetch(outcome.dataset.outcome, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      if (response.ok) {
        const body = await response.json();
        if (body.known) {
          shown.textContent = body.text;
          outcome.dataset.known = "true";
          if (hint) hint.remove();
          return;
        }
      }
    } catch {
      // The network dropped a request: the next one may pass.
    }
    if (asked < 80) {
      window.setTimeout(ask, Math.min(250 * asked, 2000));
    } else if (hint) {
      hint.hidden = false;
    }
  };
  window.setTimeout(ask, 250);
}

// After a refused form, the first field with an error gets the focus.
const invalid = document.querySelector("[aria-invalid=true]");
if (invalid) invalid.focus();

// The browser upload: address from the console, bytes straight to it, then verify. A large
// file goes in parts, several at once; a part whose connection broke is sent again, and a
// second "Upload" of the same file after a failure sends only the parts still missing.
// Whatever fails ends in a sentence beside the file and an enabled button; Cancel aborts
// every request in flight and deletes the pending build (if that delete cannot be sent, the
// sweeper removes the build when its upload link expires).
const form = document.getElementById("upload-form");
if (form) {
  const file = form.querySelector("#f-file");
  const error = form.querySelector("#e-file");
  const chosenText = form.querySelector("#upload-chosen");
  const bar = form.querySelector("#upload-bar");
  const progress = form.querySelector("#upload-progress");
  const status = form.querySelector("#upload-status");
  const button = form.querySelector("button[type=submit]");
  const cancel = form.querySelector("#upload-cancel");
  const done = document.getElementById("upload-done");
  const buildsPath = form.dataset.builds;
  const headers = { "Content-Type": "application/json", "X-CSRF-Token": form.dataset.csrf };

  // As the server writes sizes (builds/service.py human_size): "812 bytes", "8.5 KiB", "1.2 GiB".
  const humanSize = (size) => {
    let value = size;
    for (const unit of ["bytes", "KiB", "MiB", "GiB"]) {
      if (value < 1024 || unit === "GiB") {
        if (unit === "bytes") return `${size} bytes`;
        return `${value.toFixed(1).replace(/\.0$/, "")} ${unit}`;
      }
      value /= 1024;
    }
    return `${size} bytes`;
  };
  const timeLeft = (seconds) => {
    if (seconds < 60) return `about ${Math.max(1, Math.ceil(seconds))} s left`;
    if (seconds < 3600) return `about ${Math.ceil(seconds / 60)} min left`;
    const hours = Math.floor(seconds / 3600);
    return `about ${hours} h ${Math.ceil((seconds - hours * 3600) / 60)} min left`;
  };

  // A refusal that reads as a sentence: the problem's detail (RFC 9457, as the API's), a
  // field's message, else what happened in words. Never a status code alone.
  // `buildId`: the build the refusal names (the same file, or the same version code), linked.
  class Refused extends Error {
    constructor(message, buildId = null) { super(message); this.buildId = buildId; }
  }
  class Cancelled extends Error {}
  const sentence = (text) => {
    const trimmed = String(text).trim();
    const capital = trimmed.charAt(0).toUpperCase() + trimmed.slice(1);
    return /[.!?]$/.test(capital) ? capital : `${capital}.`;
  };
  const refusal = (response, body) => {
    const said = (body && body.errors && body.errors[0] && body.errors[0].message) ||
      (body && body.detail);
    const named = body && typeof body.buildId === "string" ? body.buildId : null;
    if (said) return new Refused(sentence(said), named);
    if (response.status === 413) return new Refused("This file is too large for the server.");
    if (response.status >= 500) {
      return new Refused("Buildbay could not take the upload just now; press Upload again in a moment.");
    }
    return new Refused("Buildbay refused the upload; reload the page and try again.");
  };

  // One upload at a time: its abort signal and the requests to abort on Cancel.
  let current = null;
  const send = async (url, body) => {
    let response;
    try {
      response = await fetch(url, {
        method: "POST", headers, body: JSON.stringify(body), signal: current.controller.signal,
      });
    } catch (problem) {
      if (current.cancelled) throw new Cancelled();
      throw new Refused("Buildbay could not be reached; check the connection and press Upload again.");
    }
    const answer = await response.json().catch(() => null);
    if (!response.ok) throw refusal(response, answer);
    return answer;
  };

  // Speed over the last few seconds, and from it the time left.
  let samples = [];
  const showProgress = (sent, total) => {
    const percent = Math.floor((sent / total) * 100);
    bar.value = percent;
    const at = performance.now();
    samples.push([at, sent]);
    while (samples.length > 2 && at - samples[0][0] > 5000) samples.shift();
    const [since, before] = samples[0];
    let text = `Uploading: ${percent}% · ${humanSize(sent)} of ${humanSize(total)}`;
    if (at - since >= 1000 && sent > before) {
      const speed = (sent - before) / ((at - since) / 1000);
      text += ` · ${humanSize(Math.round(speed))}/s · ${timeLeft((total - sent) / speed)}`;
    }
    status.textContent = text;
  };
  const put = (url, extraHeaders, blob, onProgress) => new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    current.requests.add(request);
    const settle = (outcome) => { current.requests.delete(request); outcome(); };
    request.open("PUT", url);
    for (const [name, value] of Object.entries(extraHeaders)) request.setRequestHeader(name, value);
    request.upload.onprogress = (e) => {
      if (e.lengthComputable) onProgress(e.loaded, e.total);
    };
    request.onload = () => settle(() => {
      if (request.status < 300) return resolve();
      let body = null;
      try { body = JSON.parse(request.responseText); } catch { /* not JSON: said below */ }
      return reject(refusal(request, body));
    });
    request.onerror = () => settle(() => reject(new Refused(
      "The connection broke during the upload; press Upload again.")));
    request.onabort = () => settle(() => reject(new Cancelled()));
    request.send(blob);
  });

  const inFlight = 4;
  let resumable = null; // {key, link, done: Set}: the upload in parts a failure cut off
  const pause = (ms) => new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    current.controller.signal.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(new Cancelled());
    }, { once: true });
  });

  const putParts = async (chosen, link) => {
    const { partSize, partsCount } = link.multipart;
    const sent = resumable.done;
    const loaded = new Map();
    const report = () => {
      let bytes = 0;
      for (const n of sent) bytes += Math.min(partSize, chosen.size - (n - 1) * partSize);
      for (const partial of loaded.values()) bytes += partial;
      showProgress(bytes, chosen.size);
    };
    for (let attempt = 0; ; attempt += 1) {
      const missing = [];
      for (let n = 1; n <= partsCount; n += 1) if (!sent.has(n)) missing.push(n);
      if (missing.length === 0) return;
      if (attempt === 5) {
        throw new Refused("The connection keeps breaking; press Upload again to send the rest.");
      }
      if (attempt > 0) await pause(250 * 2 ** attempt);
      for (let first = 0; first < missing.length; first += 100) {
        const targets = await send(`${form.dataset.start}/${link.buildId}/parts`,
          { partNumbers: missing.slice(first, first + 100) });
        const queue = [...targets.parts];
        const worker = async () => {
          while (queue.length) {
            if (current.cancelled) throw new Cancelled();
            const target = queue.shift();
            const start = (target.partNumber - 1) * partSize;
            const blob = chosen.slice(start, Math.min(start + partSize, chosen.size));
            try {
              await put(target.url, target.headers || {}, blob, (bytes) => {
                loaded.set(target.partNumber, bytes);
                report();
              });
              sent.add(target.partNumber);
            } catch (problem) {
              if (problem instanceof Cancelled) throw problem;
              // Sent again in the next round, with a fresh address.
            }
            loaded.delete(target.partNumber);
            report();
          }
        };
        await Promise.all(Array.from({ length: inFlight }, worker));
      }
    }
  };

  const showChosen = () => {
    const chosen = file.files[0];
    chosenText.textContent = chosen ? `${chosen.name}, ${humanSize(chosen.size)}` : "";
  };
  file.addEventListener("change", showChosen);

  // Drag and drop: a file dropped anywhere on the form is the one to upload.
  const dropping = (on) => form.classList.toggle("dropping", on);
  form.addEventListener("dragover", (event) => {
    if (!event.dataTransfer || ![...event.dataTransfer.types].includes("Files")) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "copy";
    dropping(true);
  });
  form.addEventListener("dragleave", (event) => {
    if (!form.contains(event.relatedTarget)) dropping(false);
  });
  form.addEventListener("drop", (event) => {
    event.preventDefault();
    dropping(false);
    if (current || !event.dataTransfer || event.dataTransfer.files.length === 0) return;
    if (event.dataTransfer.files.length > 1) {
      error.textContent = "Drop one build file at a time.";
      error.hidden = false;
      return;
    }
    file.files = event.dataTransfer.files;
    error.hidden = true;
    file.removeAttribute("aria-invalid");
    showChosen();
  });

  // Leaving the page would cut the upload off: the browser asks first.
  window.addEventListener("beforeunload", (event) => {
    if (!current) return;
    event.preventDefault();
    event.returnValue = "";
  });

  cancel.addEventListener("click", () => {
    if (!current || current.cancelled) return;
    current.cancelled = true;
    status.textContent = "Cancelling…";
    current.controller.abort();
    for (const request of [...current.requests]) request.abort();
  });

  const finish = (message, buildId = null) => {
    current = null;
    samples = [];
    cancel.hidden = true;
    button.disabled = false;
    file.disabled = false;
    if (message) {
      progress.hidden = true;
      status.textContent = "";
      error.textContent = message;
      if (buildId) {
        const link = document.createElement("a");
        link.href = `${buildsPath}/${encodeURIComponent(buildId)}`;
        link.textContent = "Open that build";
        error.append(" ", link);
      }
      error.hidden = false;
      file.setAttribute("aria-invalid", "true");
    }
  };

  // The build a cancelled upload left pending: deleted now, or swept when its link expires.
  const forget = async (buildId) => {
    resumable = null;
    if (!buildId) return;
    try {
      await fetch(`${buildsPath}/${buildId}/delete`, {
        method: "POST", headers, body: "{}", redirect: "manual",
      });
    } catch {
      // The sweeper deletes it when its upload link expires.
    }
  };

  const upload = async (chosen) => {
    const key = `${chosen.name}|${chosen.size}|${chosen.lastModified}`;
    let link = resumable && resumable.key === key ? resumable.link : null;
    if (!link) {
      const multipart = chosen.size > Number(form.dataset.partsFrom);
      link = await send(form.dataset.start,
        { fileName: chosen.name, fileSize: chosen.size, multipart });
      resumable = link.multipart ? { key, link, done: new Set() } : null;
    }
    current.buildId = link.buildId;
    current.resumable = Boolean(link.multipart);
    if (current.cancelled) throw new Cancelled();
    if (link.multipart) await putParts(chosen, link);
    else await put(link.uploadUrl, link.uploadHeaders || {}, chosen, showProgress);
    status.textContent = "Checking the upload…";
    current.verifying = true;
    cancel.hidden = true; // the bytes are in: verify is quick, or runs on the server
    const notes = form.querySelector("#f-notes").value;
    const ticked = [...form.querySelectorAll("input[name=channel]:checked")].map((box) => box.value);
    // None ticked: the server's rule (`default`, once the build is distributed to everyone).
    const channels = ticked.length ? ticked : null;
    const mandatory = form.querySelector("input[name=mandatory]").checked;
    return send(`${form.dataset.start}/${link.buildId}/verify`, { notes, channels, mandatory });
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (current) return;
    error.hidden = true;
    file.removeAttribute("aria-invalid");
    if (done) done.hidden = true;
    const chosen = file.files[0];
    if (!chosen) return finish("Choose a build file first, or drop one here.");
    if (chosen.size === 0) return finish("This file is empty: choose the build file itself.");
    current = {
      controller: new AbortController(), requests: new Set(), cancelled: false, buildId: null,
      resumable: false, verifying: false,
    };
    button.disabled = true;
    file.disabled = true;
    cancel.hidden = false;
    progress.hidden = false;
    bar.value = 0;
    status.textContent = "Starting…";
    let build;
    try {
      build = await upload(chosen);
    } catch (problem) {
      if (problem instanceof Cancelled || current.cancelled) {
        await forget(current.buildId); // "Cancelling…" meanwhile; Upload waits for it
        finish(null);
        progress.hidden = true;
        error.textContent = "Upload cancelled: nothing was kept.";
        error.hidden = false;
        return;
      }
      const message = problem instanceof Refused ? problem.message
        : "The upload stopped unexpectedly; press Upload again.";
      // A single PUT cut off has nothing to resume: its pending build goes now. Parts already
      // sent wait for the next "Upload"; a build verify refused stays, with its reason.
      const { buildId, resumable: inParts, verifying } = current;
      if (!inParts && !verifying) await forget(buildId);
      return finish(message, problem instanceof Refused ? problem.buildId : null);
    }
    resumable = null;
    current = null; // nothing in flight: leaving the page loses nothing now
    status.textContent = "Uploaded";
    // The list shows the new build after a reload; the confirmation is kept for it.
    sessionStorage.setItem("buildbay-uploaded", JSON.stringify({
      id: build.buildId, file: chosen.name, size: chosen.size, checking: build.status === "processing",
    }));
    // Back where the person was, where the confirmation shows (the list has the new row too).
    window.location.assign(`${window.location.pathname}#upload`);
    window.location.reload();
  });

  // After the reload: what was uploaded, and a link to its page.
  const uploaded = sessionStorage.getItem("buildbay-uploaded");
  if (uploaded && done) {
    sessionStorage.removeItem("buildbay-uploaded");
    try {
      const last = JSON.parse(uploaded);
      const link = document.createElement("a");
      link.href = `${buildsPath}/${encodeURIComponent(last.id)}`;
      link.textContent = "Open its page";
      done.querySelector("span").textContent = `Uploaded ${last.file} (${humanSize(last.size)})` +
        (last.checking ? ": its file is being checked. " : ": it is ready. ");
      done.querySelector("span").after(link);
      done.hidden = false;
    } catch {
      // A confirmation from another version of this page: nothing to show.
    }
  }
}

// The feedback inbox and a feedback's page: j moves to the next (older) feedback, k to the
// previous (newer), as in a mail reader. In the inbox the row moved to is marked and its link
// focused (Enter opens it); on a feedback's page the keys follow its Older/Newer links. Keys
// typed into a field, or with a modifier, are the field's.
const typing = (target) =>
  target instanceof HTMLElement &&
  (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
const inbox = document.querySelector("[data-keys=rows]");
const feedbackKeys = document.querySelectorAll("a[data-key]");
if (inbox || feedbackKeys.length) {
  const rows = inbox ? Array.from(inbox.querySelectorAll("[data-row]")) : [];
  let at = -1;
  const mark = (index) => {
    if (at >= 0) {
      rows[at].classList.remove("current");
      rows[at].removeAttribute("aria-current");
    }
    at = index;
    rows[at].classList.add("current");
    rows[at].setAttribute("aria-current", "true");
    const link = rows[at].querySelector("a.open");
    if (link) link.focus({ preventScroll: true });
    rows[at].scrollIntoView({ block: "nearest" });
  };
  document.addEventListener("keydown", (event) => {
    if (event.key !== "j" && event.key !== "k") return;
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    if (rows.length) {
      // From the row whose link has the focus, if any (a click or Tab moved it).
      const focused = rows.findIndex((row) => row.contains(document.activeElement));
      const from = focused >= 0 ? focused : at;
      const next = event.key === "j" ? Math.min(from + 1, rows.length - 1) : Math.max(from - 1, 0);
      mark(from < 0 ? 0 : next);
      event.preventDefault();
      return;
    }
    const link = document.querySelector(`a[data-key="${event.key}"]`);
    if (link) {
      event.preventDefault();
      window.location.assign(link.href);
    }
  });
}

// Rollout sliders: the number beside each follows it while it moves (without JavaScript, the
// saved number shows, and the form posts the slider's value all the same).
document.addEventListener("input", (event) => {
  const slider = event.target;
  if (!(slider instanceof HTMLInputElement) || !slider.dataset.output) return;
  const shown = document.getElementById(slider.dataset.output);
  if (shown) shown.textContent = slider.value;
});

// A webhook's format: beside the field, which one the receiver's address looks like it needs,
// and a warning when the one chosen is another. The rules and the sentences are the server's
// (webhooks/chat.py's HOST_RULES, console/webhooks.py's format_advice), in the attribute as
// JSON; the page after the form says the same without JavaScript.
const formatAdvice = document.querySelector("[data-format-advice]");
if (formatAdvice) {
  const urlField = document.getElementById("f-webhook-url");
  const formatField = document.getElementById("f-webhook-format");
  const hints = JSON.parse(formatAdvice.dataset.formatAdvice);
  const labels = {};
  for (const option of formatField.options) labels[option.value] = option.textContent;
  const suggest = (value) => {
    let url;
    try {
      url = new URL(value.trim());
    } catch {
      return null;
    }
    const host = url.hostname.toLowerCase().replace(/\.$/, "");
    const rule = hints.rules.find((r) =>
      (r.hosts.includes(host) || r.suffixes.some((s) => host.endsWith(s))
        || r.within.some((w) => host.includes(w)))
      && url.pathname.startsWith(r.pathPrefix));
    return rule ? rule.format : null;
  };
  const suggested = formatAdvice.querySelector("[data-suggested]");
  const suggestedLabel = formatAdvice.querySelector("[data-suggested-label]");
  const warning = formatAdvice.querySelector("[data-format-warning]");
  const advise = () => {
    const url = urlField.value.trim();
    const fit = url ? suggest(url) : null;
    const chosen = formatField.value;
    suggested.hidden = !fit;
    suggestedLabel.textContent = fit ? labels[fit] : "";
    let said = "";
    if (fit && fit !== chosen) {
      said = hints.looksLike.replaceAll("{fit}", labels[fit]);
    } else if (!fit && url && chosen !== "standard") {
      said = hints.notLike.replaceAll("{chosen}", labels[chosen]);
    }
    warning.textContent = said;
    warning.hidden = !said;
  };
  urlField.addEventListener("input", advise);
  formatField.addEventListener("change", advise);
}
