// Renders Mermaid diagrams with real Mermaid in headless chromium and measures them.
//
// Usage: node render.mjs IN.json OUT.json [PNG_DIR]
//   IN.json: [{"name": ..., "code": ...}, ...]; every diagram is rendered once per theme ("default", "dark")
//   in a page 800 px wide, as a GitHub comment shows it.
// OUT.json: per diagram and theme: the SVG's natural width/height (its viewBox: wider than the page means
// the browser scales it down), parse/render errors, edge labels that overlap a node or another label, and
// the worst text/fill contrast ratio over the nodes (WCAG formula), so dark mode is checked by numbers.
// Environment: CHROMIUM (default /usr/bin/chromium), MERMAID_JS (default: this folder's node_modules).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";

const here = path.dirname(fileURLToPath(import.meta.url));
const [input, output, pngDir] = process.argv.slice(2);
const diagrams = JSON.parse(fs.readFileSync(input, "utf8"));
const mermaidJs = process.env.MERMAID_JS || path.join(here, "node_modules/mermaid/dist/mermaid.min.js");
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  // No downloads, no GPU, no sandbox (root in a container), nothing phoning home.
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"],
});
const page = await browser.newPage();
await page.setViewport({ width: 800, height: 600 });
await page.setContent('<html><body style="margin:0"><div id="out" style="width:800px"></div></body></html>');
await page.addScriptTag({ path: mermaidJs });
const version = JSON.parse(fs.readFileSync(path.join(path.dirname(mermaidJs), "../package.json"), "utf8")).version;

// Runs in the page: render one diagram and measure it.
async function measure(code, theme) {
  const bg = theme === "dark" ? "#0d1117" : "#ffffff";  // GitHub's dark and light page colours
  document.body.style.background = bg;
  window.mermaid.initialize({ startOnLoad: false, theme, securityLevel: "strict" });
  const out = document.getElementById("out");
  out.innerHTML = "";
  let svgText;
  try {
    ({ svg: svgText } = await window.mermaid.render("d" + Math.random().toString(36).slice(2), code));
  } catch (e) {
    return { error: String(e && e.message || e) };
  }
  out.innerHTML = svgText;
  const svg = out.querySelector("svg");
  const vb = svg.viewBox.baseVal;
  const rgb = (c) => (c.match(/[\d.]+/g) || []).slice(0, 4).map(Number);
  const lum = (c) => {
    const [r, g, b] = rgb(c).map((v) => v / 255).map((v) => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const contrast = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const opaque = (c) => c && c !== "none" && !(rgb(c).length === 4 && rgb(c)[3] === 0);
  let worst = { ratio: 99, node: null };
  for (const node of svg.querySelectorAll("g.node")) {
    const shape = node.querySelector("rect, polygon, path, circle");
    const text = node.querySelector(".nodeLabel, text");
    if (!shape || !text || !text.textContent.trim()) continue;
    let fill = getComputedStyle(shape).fill;
    if (!opaque(fill)) fill = getComputedStyle(document.body).backgroundColor;
    const ratio = contrast(getComputedStyle(text).color, fill);
    if (ratio < worst.ratio) worst = { ratio: Math.round(ratio * 100) / 100, node: text.textContent.trim() };
  }
  const box = (el) => { const r = el.getBoundingClientRect(); return { x0: r.left, y0: r.top, x1: r.right, y1: r.bottom }; };
  const meets = (a, b) => a.x0 < b.x1 - 1 && b.x0 < a.x1 - 1 && a.y0 < b.y1 - 1 && b.y0 < a.y1 - 1;
  const labels = [...svg.querySelectorAll("g.edgeLabel")].filter((l) => l.textContent.trim())
    .map((l) => ({ text: l.textContent.trim(), box: box(l) })).filter((l) => l.box.x1 - l.box.x0 > 0);
  const nodes = [...svg.querySelectorAll("g.node")].map((n) => ({ text: n.textContent.trim(), box: box(n) }));
  const clashes = [];
  labels.forEach((l, i) => {
    for (const n of nodes) if (meets(l.box, n.box)) clashes.push(`${l.text} / node ${n.text}`);
    for (const m of labels.slice(i + 1)) if (meets(l.box, m.box)) clashes.push(`${l.text} / ${m.text}`);
  });
  const hidden = [...svg.querySelectorAll("g.edgeLabel")].filter((l) => l.textContent.trim())
    .filter((l) => { const r = l.getBoundingClientRect(); return r.width === 0 || r.height === 0; }).length;
  return { width: Math.round(vb.width), height: Math.round(vb.height), worst_contrast: worst, clashes, hidden_labels: hidden };
}

const results = [];
for (const d of diagrams) {
  for (const theme of ["default", "dark"]) {
    const r = await page.evaluate(measure, d.code, theme);
    if (pngDir && !r.error) {
      const el = await page.$("#out svg");
      await el.screenshot({ path: path.join(pngDir, `${d.name}.${theme}.png`) });
    }
    results.push({ name: d.name, theme, ...r });
  }
}
fs.writeFileSync(output, JSON.stringify({ mermaid: version, results }, null, 1));
await browser.close();
