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

  // Text with `code` spans shown as code; built as nodes, so nothing in it is ever markup.
  function written(div, body) {
    div.replaceChildren();
    body.split("`").forEach((piece, i) => {
      if (i % 2) {
        const code = document.createElement("code");
        code.textContent = piece;
        div.appendChild(code);
      } else if (piece) {
        div.appendChild(document.createTextNode(piece));
      }
    });
  }

  async function say(body) {
    const data = new FormData();
    data.append("text", body);
    return fetch("/chat/send", {method: "POST", headers: {"x-csrf-token": csrf}, body: data});
  }

  // Answers offered as buttons (an approval: Approve and Deny); pressing one says its text.
  function offer(item, buttons) {
    item.querySelector(".answers")?.remove();
    if (!buttons.length) return;
    item.classList.add("card");
    const row = document.createElement("div");
    row.className = "answers";
    for (const answer of buttons) {
      const button = document.createElement("button");
      button.type = "button";
      const verb = answer.split(" ")[0].toLowerCase();
      button.textContent = {yes: "Approve", no: "Deny"}[verb] || answer;
      button.className = verb === "no" ? "secondary" : "";
      button.addEventListener("click", async () => {
        row.querySelectorAll("button").forEach((b) => { b.disabled = true; });
        const sent = await say(answer);
        show(sent.ok ? "user" : "error", null, sent.ok ? answer : await sent.text(), false);
      });
      row.appendChild(button);
    }
    item.appendChild(row);
  }

  function show(role, id, body, writing, buttons = []) {
    const follow = role !== "assistant" || atEnd();
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
    written(item.firstChild, body);
    offer(item, buttons);
    item.classList.toggle("writing", writing);
    if (follow) newest();
  }

  // The composer ends the page, so the page's end shows the newest message just above it.
  function newest() {
    window.scrollTo(0, document.documentElement.scrollHeight);
  }

  // Whether the page's end is in sight: a reply then keeps it so, and one who scrolled back
  // to read is left reading.
  function atEnd() {
    const root = document.documentElement;
    return root.scrollHeight - window.innerHeight - window.scrollY < 48;
  }

  const events = new EventSource("/chat/events");
  events.addEventListener("preview", (e) => {
    const m = JSON.parse(e.data);
    show("assistant", m.id, m.text, true);
  });
  events.addEventListener("message", (e) => {
    const m = JSON.parse(e.data);
    if (m.audio) {  // a spoken reply: played here, after its text
      const item = document.createElement("li");
      item.className = "assistant voice";
      const audio = document.createElement("audio");
      audio.controls = true;
      audio.preload = "metadata";
      audio.src = m.audio;
      item.appendChild(audio);
      list.appendChild(item);
      if (atEnd()) newest();
      return;
    }
    show("assistant", m.id, m.text, false, m.buttons || []);
  });
  newest();  // a long history opens at its end

  const file = document.getElementById("file");
  const chosen = document.getElementById("chosen");
  function choose() {
    const names = Array.from(file.files, (f) => f.name);
    chosen.textContent = names.length > 1 ? `${names.length} files` : names.join("");
    chosen.title = names.join(", ");
  }
  file.addEventListener("change", choose);
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
      choose();
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
