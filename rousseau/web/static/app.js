// rousseau's one script: live parts of the dashboard, and the web chat. No inline script
// anywhere (the CSP forbids it); server-rendered HTML arrives escaped, chat text as text.
"use strict";

const csrf = document.querySelector('meta[name="csrf"]')?.content || "";

function liveParts() {
  const parts = document.querySelectorAll("[data-live]");
  if (!parts.length) return;
  const events = new EventSource("/live");
  for (const part of parts) {
    events.addEventListener(part.dataset.live, (e) => {
      part.innerHTML = JSON.parse(e.data).html;
    });
  }
}

function chat() {
  const form = document.getElementById("say");
  if (!form) return;
  const list = document.getElementById("conversation");
  const text = document.getElementById("text");
  const shown = new Map();

  function show(role, id, body, writing) {
    let item = id ? shown.get(id) : null;
    if (!item) {
      item = document.createElement("li");
      item.className = role;
      const div = document.createElement("div");
      div.className = "text";
      item.appendChild(div);
      list.appendChild(item);
      if (id) shown.set(id, item);
    }
    item.firstChild.textContent = body;
    item.classList.toggle("writing", writing);
    item.scrollIntoView({block: "end"});
  }

  const events = new EventSource("/chat/events");
  events.addEventListener("preview", (e) => {
    const m = JSON.parse(e.data);
    show("assistant", m.id, m.text, true);
  });
  events.addEventListener("message", (e) => {
    const m = JSON.parse(e.data);
    show("assistant", m.id, m.text, false);
  });

  const file = document.getElementById("file");
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = text.value.trim();
    const names = Array.from(file.files).map((f) => `[${f.name}]`);
    if (!body && !names.length) return;
    const sent = await fetch("/chat/send", {
      method: "POST",
      headers: {"x-csrf-token": csrf},
      body: new FormData(form),  // the text and any files, as multipart
    });
    if (sent.ok) {
      show("user", null, [body, ...names].filter(Boolean).join("\n"), false);
      text.value = "";
      file.value = "";
    } else {
      show("error", null, await sent.text(), false);
    }
  });
  text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
}

liveParts();
chat();
