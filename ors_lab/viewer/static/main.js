// ors_lab front end, last part: the entry point. The model's "view" names the renderer in ORS.views.
// A renderer is ({model, el}) => cleanup?; it draws model.get("data") and redraws on "change:data".
function render({ model, el }) {
  const root = ORS.h("div", { class: "ors-lab" });
  el.append(root);
  const draw = ORS.views[model.get("view")];
  if (!draw) {  // no renderer for this view: its text form, kept up to date
    const pre = ORS.h("pre", { class: "ol-pre" }, model.get("text"));
    const redraw = () => { pre.textContent = model.get("text"); };
    root.append(pre);
    model.on("change:text", redraw);
    return () => model.off("change:text", redraw);
  }
  return draw({ model, el: root });
}

export default { render };
