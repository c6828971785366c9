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

// The browser upload: address from the console, bytes straight to it, then verify.
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

  const put = (url, extraHeaders, blob) => new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open("PUT", url);
    for (const [name, value] of Object.entries(extraHeaders)) request.setRequestHeader(name, value);
    request.upload.onprogress = (e) => {
      if (!e.lengthComputable) return;
      const percent = Math.floor((e.loaded / e.total) * 100);
      bar.value = percent;
      status.textContent = `Uploading: ${percent}%`;
    };
    request.onload = () => (request.status < 300 ? resolve() : reject(new Error(
      (() => { try { return JSON.parse(request.responseText).detail; } catch { return `Upload failed (${request.status})`; } })())));
    request.onerror = () => reject(new Error("The connection broke during the upload; try again"));
    request.send(blob);
  });

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
    const started = await fetch(form.dataset.start, {
      method: "POST", headers, body: JSON.stringify({ fileName: chosen.name, fileSize: chosen.size }),
    });
    const link = await started.json().catch(() => null);
    if (!started.ok) return fail(firstError(link));
    try {
      await put(link.uploadUrl, link.uploadHeaders || {}, chosen);
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
    status.textContent = "Ready";
    window.location.assign(`${window.location.pathname}#build-${build.buildId}`);
    window.location.reload();
  });
}
