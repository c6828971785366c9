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

// After a refused form, the first field with an error gets the focus.
const invalid = document.querySelector("[aria-invalid=true]");
if (invalid) invalid.focus();

// The browser upload: address from the console, bytes straight to it, then verify. A large
// file goes in parts, several at once; a part whose connection broke is sent again, and a
// second "Upload" of the same file after a failure sends only the parts still missing.
const form = document.getElementById("upload-form");
if (form) {
  const file = form.querySelector("#f-file");
  const error = form.querySelector("#e-file");
  const bar = form.querySelector("#upload-bar");
  const status = form.querySelector("#upload-status");
  const button = form.querySelector("button[type=submit]");
  const headers = { "Content-Type": "application/json", "X-CSRF-Token": form.dataset.csrf };

  const fail = (message) => {
    error.textContent = message;
    error.hidden = false;
    file.setAttribute("aria-invalid", "true");
    button.disabled = false;
  };
  // Refusals are RFC 9457 problems, as the API's: a field's message, else the detail.
  const firstError = (body) =>
    (body && body.errors && body.errors[0] && body.errors[0].message) ||
    (body && body.detail) || "The upload failed";

  const showProgress = (done, total) => {
    const percent = Math.floor((done / total) * 100);
    bar.value = percent;
    status.textContent = `Uploading: ${percent}%`;
  };
  const put = (url, extraHeaders, blob, onProgress) => new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open("PUT", url);
    for (const [name, value] of Object.entries(extraHeaders)) request.setRequestHeader(name, value);
    request.upload.onprogress = (e) => {
      if (e.lengthComputable) onProgress(e.loaded, e.total);
    };
    request.onload = () => (request.status < 300 ? resolve() : reject(new Error(
      (() => { try { return JSON.parse(request.responseText).detail; } catch { return `Upload failed (${request.status})`; } })())));
    request.onerror = () => reject(new Error("The connection broke during the upload; try again"));
    request.send(blob);
  });

  const inFlight = 4;
  let resumable = null; // {key, link, done: Set}: the upload in parts a failure cut off
  const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

  const putParts = async (chosen, link) => {
    const { partSize, partsCount } = link.multipart;
    const done = resumable.done;
    const loaded = new Map();
    const report = () => {
      let sent = 0;
      for (const n of done) sent += Math.min(partSize, chosen.size - (n - 1) * partSize);
      for (const bytes of loaded.values()) sent += bytes;
      showProgress(sent, chosen.size);
    };
    for (let attempt = 0; ; attempt += 1) {
      const missing = [];
      for (let n = 1; n <= partsCount; n += 1) if (!done.has(n)) missing.push(n);
      if (missing.length === 0) return;
      if (attempt === 5) throw new Error("The connection keeps breaking; press Upload again to resume");
      if (attempt > 0) await sleep(250 * 2 ** attempt);
      for (let first = 0; first < missing.length; first += 100) {
        const asked = await fetch(`${form.dataset.start}/${link.buildId}/parts`, {
          method: "POST", headers, body: JSON.stringify({ partNumbers: missing.slice(first, first + 100) }),
        });
        const targets = await asked.json().catch(() => null);
        if (!asked.ok) throw new Error(firstError(targets));
        const queue = [...targets.parts];
        const worker = async () => {
          while (queue.length) {
            const target = queue.shift();
            const start = (target.partNumber - 1) * partSize;
            const blob = chosen.slice(start, Math.min(start + partSize, chosen.size));
            try {
              await put(target.url, target.headers || {}, blob, (bytes) => {
                loaded.set(target.partNumber, bytes);
                report();
              });
              done.add(target.partNumber);
            } catch {
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

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    file.removeAttribute("aria-invalid");
    const chosen = file.files[0];
    if (!chosen) return fail("Choose a build file first");
    if (chosen.size === 0) return fail("This file is empty");
    button.disabled = true;
    form.querySelector("#upload-progress").hidden = false;
    status.textContent = "Starting…";
    const key = `${chosen.name}|${chosen.size}|${chosen.lastModified}`;
    let link = resumable && resumable.key === key ? resumable.link : null;
    if (!link) {
      const multipart = chosen.size > Number(form.dataset.partsFrom);
      const started = await fetch(form.dataset.start, {
        method: "POST", headers,
        body: JSON.stringify({ fileName: chosen.name, fileSize: chosen.size, multipart }),
      });
      link = await started.json().catch(() => null);
      if (!started.ok) return fail(firstError(link));
      resumable = link.multipart ? { key, link, done: new Set() } : null;
    }
    try {
      if (link.multipart) await putParts(chosen, link);
      else await put(link.uploadUrl, link.uploadHeaders || {}, chosen, showProgress);
    } catch (problem) {
      return fail(problem.message);
    }
    status.textContent = "Checking the upload…";
    const notes = form.querySelector("#f-notes").value;
    const channels = [...form.querySelectorAll("input[name=channel]:checked")].map((box) => box.value);
    const mandatory = form.querySelector("input[name=mandatory]").checked;
    const verified = await fetch(`${form.dataset.start}/${link.buildId}/verify`, {
      method: "POST", headers, body: JSON.stringify({ notes, channels, mandatory }),
    });
    const build = await verified.json().catch(() => null);
    if (!verified.ok) return fail(firstError(build));
    resumable = null;
    status.textContent = build.status === "processing" ? "Checking the file…" : "Ready";
    window.location.assign(`${window.location.pathname}#build-${build.buildId}`);
    window.location.reload();
  });
}
