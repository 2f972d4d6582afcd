// The chat page at `/` in headless Chromium, driven by playwright-core as a person would use it:
// type a message, press Enter, wait for the streamed answer; then a second message in the same
// conversation.
//
// Usage: node chat_page.mjs BASE_URL CHROMIUM SCREENSHOT_PNG
// Prints one JSON line with what the page showed and what it sent; the caller judges it.
// playwright-core is resolved from OXIBONSAI_TEST_NODE_MODULES (ES modules ignore NODE_PATH).
import { createRequire } from "node:module";

const modules = process.env.OXIBONSAI_TEST_NODE_MODULES;
if (!modules) throw new Error("OXIBONSAI_TEST_NODE_MODULES is not set");
const require = createRequire(modules.replace(/\/?$/, "/"));
const { chromium } = require("playwright-core");

const [base, executablePath, screenshot] = process.argv.slice(2);
const MAX_TOKENS = 96;
// Root in a container has no user namespaces for Chromium's sandbox.
const browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox"] });
try {
  const page = await browser.newPage();
  const pageErrors = [], failedResponses = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("response", (r) => { if (r.status() >= 400) failedResponses.push(`${r.status()} ${r.url()}`); });
  // What the page sends, as it sent it; then bounded on the way out: the page asks for no limit,
  // so a rambling sampled answer could fill the slot's context and make the test's length (and
  // the second turn's fit) a matter of chance.
  const sent = [];
  await page.route("**/v1/chat/completions", async (route) => {
    const body = JSON.parse(route.request().postData() ?? "null");
    sent.push(body);
    await route.continue({ postData: JSON.stringify({ ...body, max_tokens: MAX_TOKENS }) });
  });

  await page.goto(base + "/");
  // The model name replaces "loading…" once /v1/models answered.
  await page.waitForFunction(() => !document.getElementById("model").textContent.includes("loading"));
  const model = await page.textContent("#model");
  // Every change to an answer's text before it is marked done: a streamed answer grows in
  // several steps, a buffered one appears at once.
  await page.evaluate(() => {
    window.growth = [];
    new MutationObserver((records) => {
      for (const r of records) {
        const node = r.target.nodeType === Node.ELEMENT_NODE ? r.target : r.target.parentElement;
        const box = node?.closest(".msg.assistant");
        if (!box || box.dataset.done === "1") continue;
        const turn = [...document.querySelectorAll(".msg.assistant")].indexOf(box);
        (window.growth[turn] ??= []).push(box.innerText.length);
      }
    }).observe(document.getElementById("log"), { childList: true, subtree: true, characterData: true });
  });

  const turns = [];
  for (const [i, text] of ["Hello! What is the capital of France?", "And of Italy?"].entries()) {
    await page.fill("#input", text);
    await page.press("#input", "Enter");
    await page.waitForSelector(`.msg.assistant >> nth=${i}`);
    await page.waitForSelector(`.msg.assistant[data-done="1"] >> nth=${i}`, { timeout: 120_000 });
    turns.push({
      answer: await page.locator(".msg.assistant").nth(i).innerText(),
      error: await page.locator(".msg.assistant").nth(i).locator(".error").count(),
      stats: await page.textContent("#stats"),
      lengths: [...new Set(await page.evaluate((t) => window.growth[t] ?? [], i))].filter((n) => n > 0),
    });
  }
  const users = await page.locator(".msg.user").allInnerTexts();
  const assistants = await page.locator(".msg.assistant").count();
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(JSON.stringify({ model, turns, users, assistants, sent, pageErrors, failedResponses }));
} finally {
  await browser.close();
}
