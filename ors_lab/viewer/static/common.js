// ors_lab front end, part 1 of N: helpers shared by every view (joined into one ES module by widget.py).
const ORS = { views: {} };

ORS.h = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
};

ORS.fmt = (v, digits = 4) => {
  if (v === null || v === undefined || (typeof v === "number" && Number.isNaN(v))) return "-";
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (typeof v === "number" && !Number.isInteger(v)) return String(Number(v.toPrecision(digits)));
  return String(v);
};

// Same scale as ors_lab.html.colour: red through amber to green over [0, 1]; errors dark red, none grey.
ORS.colour = (reward, error = false) => {
  if (error) return "#82071e";
  if (reward === null || reward === undefined || Number.isNaN(reward)) return "#d0d7de";
  const x = Math.min(Math.max(Number(reward), 0), 1);
  return `hsl(${Math.round(120 * x)}, 65%, 45%)`;
};

// A delta (candidate − baseline), clipped to [−1, 1]: red below 0, green above, paler towards 0; 0 and none grey.
// Same scale as ors_lab.html.delta_colour.
ORS.deltaColour = (delta) => {
  if (delta === null || delta === undefined || Number.isNaN(delta)) return "#d0d7de";
  const x = Math.min(Math.max(Number(delta), -1), 1);
  if (x === 0) return "hsl(0, 0%, 78%)";
  return `hsl(${x < 0 ? 0 : 120}, 65%, ${Math.round(88 - 43 * Math.abs(x))}%)`;
};

ORS.kv = (rows) => ORS.h("table", { class: "ol-kv" },
  rows.map(([k, v]) => ORS.h("tr", {}, ORS.h("th", {}, k), ORS.h("td", {}, v instanceof Node ? v : ORS.fmt(v)))));

ORS.card = (title, subtitle, ...body) => ORS.h("div", { class: "ol-card" },
  ORS.h("div", { class: "ol-title" }, title, subtitle ? ORS.h("span", { class: "ol-sub" }, subtitle) : null), ...body);

ORS.duration = (s) => {
  if (s === null || s === undefined || !Number.isFinite(s)) return "-";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  return m < 120 ? `${m} min ${Math.round(s - 60 * m)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
};
