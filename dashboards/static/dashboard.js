// The dashboard's client: fetches each panel's data with the page's own query
// string, draws the Plotly figures built by the server, and writes every
// user-supplied string into the DOM as text (textContent), never as HTML.
"use strict";

(function () {
  const body = document.body;
  // The view's query string; a groups tab changes it in place (see loadGroups).
  let query = body.dataset.query || "";
  const refreshMs = Math.max(15, Number(body.dataset.refreshS || 60)) * 1000;
  const live = body.dataset.live === "true";
  const plotConfig = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  const timePanels = ["hit_rate", "cost", "rewarms", "ttft", "replicas"];
  // Zoomed together: the time panels and the deploy tags' panel.
  const zoomPanels = [...timePanels, "canary"];
  const svgNS = "http://www.w3.org/2000/svg";
  let syncing = false;
  // This script runs before plotly.js is parsed (see the template): the data
  // requests go out while the browser compiles plotly; drawing waits for both.
  const plotlyReady = new Promise((resolve) => {
    if (document.readyState === "loading") {
      document.addEventListener("DOMContentLoaded", resolve, { once: true });
    } else {
      resolve();
    }
  });

  function url(path, extra) {
    let text = query;
    if (extra && Object.keys(extra).length) {
      const params = new URLSearchParams(query);
      for (const [name, value] of Object.entries(extra)) params.set(name, String(value));
      text = params.toString();
    }
    return path + (text ? "?" + text : "");
  }

  async function getJSON(path, extra) {
    const answer = await fetch(url(path, extra), { headers: { Accept: "application/json" } });
    if (answer.status === 401) {
      window.location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search));
      throw new Error("signed out");
    }
    const data = await answer.json();
    if (!answer.ok) {
      throw new Error(data.detail || data.error || answer.statusText);
    }
    return { status: answer.status, data: data };
  }

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function pct(value) {
    return value === null || value === undefined ? "–" : (100 * value).toFixed(1) + "%";
  }

  // Thousands separators by hand: the first toLocaleString or Intl.NumberFormat
  // loads ICU's locale data, 50-100 ms of a cold page load.
  function count(value) {
    if (value === null || value === undefined) return "–";
    return String(Math.round(Number(value))).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  function setNote(panel, text) {
    const note = document.querySelector("#panel-" + panel + " .note");
    if (!note) return;
    note.textContent = text || "";
    note.hidden = !text;
  }

  function figureDiv(name) {
    return document.querySelector('[data-figure="' + name + '"]');
  }

  async function draw(name, figure) {
    await plotlyReady;
    const div = figureDiv(name);
    if (!figure) {
      Plotly.purge(div);
      div.classList.add("empty");
      return;
    }
    div.classList.remove("empty");
    await Plotly.react(div, figure.data, figure.layout, plotConfig);
    if (zoomPanels.includes(name) && !div.dataset.synced) {
      div.dataset.synced = "true";
      div.on("plotly_relayout", (change) => syncZoom(name, change));
    }
  }

  // Zooming one time panel zooms the others: the same moment lines up everywhere.
  function syncZoom(source, change) {
    if (syncing) return;
    let update = null;
    if (change["xaxis.range[0]"] !== undefined) {
      update = { "xaxis.range": [change["xaxis.range[0]"], change["xaxis.range[1]"]] };
    } else if (change["xaxis.autorange"]) {
      update = { "xaxis.autorange": true };
    }
    if (!update) return;
    syncing = true;
    // A panel drawn empty (the cost panel without prices) has no axes to move.
    const others = zoomPanels
      .filter((n) => n !== source && figureDiv(n).data)
      .map((n) => Plotly.relayout(figureDiv(n), update));
    Promise.all(others).finally(() => { syncing = false; });
  }

  // Dollars come worded by the server (service/alerts/money.py), as in Slack and the CLI.
  function wastedCard(wasted) {
    const card = document.getElementById("hl-wasted");
    card.querySelector(".value").textContent = wasted.value;
    const delta = card.querySelector(".delta");
    delta.textContent = wasted.delta;
    delta.className = "delta " + wasted.trend;
  }

  function headline(current, previous) {
    const ratios = ["hit_rate", "cacheable_fraction", "capture_ratio"];
    for (const name of ratios) {
      const card = document.getElementById("hl-" + name);
      card.querySelector(".value").textContent = pct(current[name]);
      const delta = card.querySelector(".delta");
      if (current[name] === null || previous[name] === null) {
        delta.textContent = previous[name] === null ? "no data in the previous range" : "";
        delta.className = "delta";
      } else {
        const pp = 100 * (current[name] - previous[name]);
        delta.textContent = (pp >= 0 ? "+" : "") + pp.toFixed(1) + " pp vs " + pct(previous[name]) + " before";
        delta.className = "delta " + (pp < -0.05 ? "worse" : pp > 0.05 ? "better" : "");
      }
    }
    const card = document.getElementById("hl-rewarms");
    card.querySelector(".value").textContent = count(current.rewarms);
    const delta = card.querySelector(".delta");
    if (!previous.requests) {
      delta.textContent = "no data in the previous range";
      delta.className = "delta";
    } else {
      const change = current.rewarms - previous.rewarms;
      const rel = previous.rewarms ? " (" + (change >= 0 ? "+" : "") + (100 * change / previous.rewarms).toFixed(0) + "%)" : "";
      delta.textContent = (change >= 0 ? "+" : "") + count(change) + rel + " vs " + count(previous.rewarms) + " before";
      delta.className = "delta " + (change > 0 ? "worse" : change < 0 ? "better" : "");
    }
  }

  function viewLine(view, payload) {
    const parts = [
      "Times in UTC. Showing " + view.from.replace("T", " ").replace("Z", "") + " to " + view.to.replace("T", " ").replace("Z", ""),
      "bucket " + view.bucket + (view.bucket_raised_from ? " (raised from " + view.bucket_raised_from + " to keep at most 2,000 points)" : ""),
      "compared with " + view.previous_from.replace("T", " ").replace("Z", "") + " onwards",
      view.newest ? "newest data " + view.newest.replace("T", " ").replace("Z", "") : "no data yet",
      payload.events + " events, " + payload.regressions + " regressions",
    ];
    document.getElementById("view-line").textContent = parts.join(" · ");
  }

  async function loadSeries() {
    const { data } = await getJSON("/dashboard/data/series");
    viewLine(data.view, data);
    headline(data.headline.current, data.headline.previous);
    wastedCard(data.headline.wasted);
    const drawing = [];
    for (const name of timePanels) {
      setNote(name, data.notes[name]);
      drawing.push(draw(name, data.figures[name]));
    }
    await Promise.all(drawing);
  }

  async function loadCapacity() {
    // A pending answer names the sample its replay runs on; asking for that sample
    // again finds it even when newer records arrived meanwhile. The server holds each
    // ask until the replay ends or 0.2 s pass, so a short pause paces the asks.
    let sample = null;
    for (;;) {
      const { data } = await getJSON("/dashboard/data/capacity", sample === null ? {} : { sample: sample });
      if (data.pending) {
        setNote("capacity", "Replaying the latest requests of " + data.model + "…");
        sample = data.sample;
        await new Promise((resolve) => setTimeout(resolve, 50));
        continue;
      }
      const sub = document.getElementById("capacity-sub");
      sub.textContent = data.model
        ? "LRU replay of " + count(data.requests) + (data.sampled ? " (the newest)" : "") + " requests of " + data.model +
          (data.sample_from ? " from " + data.sample_from.replace("T", " ").replace("Z", "") : "") +
          (data.budget ? "; current budget from the config event of " + data.budget.ts.replace("T", " ").replace("Z", "") : "")
        : "";
      setNote("capacity", data.note);
      await draw("capacity", data.figure);
      return;
    }
  }

  function cell(row, text, className) {
    row.appendChild(el("td", text, className));
  }

  function loadRegressionRows(rows) {
    const tbody = document.querySelector("#regressions tbody");
    tbody.replaceChildren();
    for (const r of rows) {
      const tr = el("tr");
      tr.dataset.regressionId = String(r.id);
      cell(tr, "#" + r.id);
      cell(tr, r.change_ts.replace("T", " ").replace("Z", ""));
      cell(tr, r.service + " · " + r.model + (r.group ? " (" + r.group.by + " " + r.group.value + ")" : ""));
      cell(tr, r.status + (r.resolved_at ? " " + r.resolved_at.replace("T", " ").replace("Z", "") : ""), "status-" + r.status);
      cell(tr, pct(r.hit_rate_before) + " → " + pct(r.hit_rate_after));
      cell(tr, pct(r.cacheable_before) + " → " + pct(r.cacheable_after));
      cell(tr, r.cost, "num cost");
      cell(tr, r.attribution);
      cell(tr, r.cause, "cause");
      // The first lines say the most; the rest folds away.
      const evidence = el("td", null, "evidence");
      const list = el("ul");
      for (const line of r.evidence.slice(0, 2)) list.appendChild(el("li", line));
      evidence.appendChild(list);
      if (r.evidence.length > 2) {
        const more = el("details");
        more.appendChild(el("summary", (r.evidence.length - 2) + " more"));
        const rest = el("ul");
        for (const line of r.evidence.slice(2)) rest.appendChild(el("li", line));
        more.appendChild(rest);
        evidence.appendChild(more);
      }
      tr.appendChild(evidence);
      cell(tr, r.alert, "alert");
      tbody.appendChild(tr);
    }
  }

  function loadPrefixRows(rows) {
    const tbody = document.querySelector("#prefixes tbody");
    tbody.replaceChildren();
    for (const p of rows) {
      const tr = el("tr");
      cell(tr, p.prefix, "mono");
      cell(tr, p.service + " · " + p.model);
      cell(tr, count(p.requests), "num");
      cell(tr, count(p.prompt_tokens), "num");
      cell(tr, pct(p.hit_rate), "num");
      cell(tr, pct(p.cacheable_fraction), "num");
      cell(tr, count(p.replicas), "num");
      cell(tr, count(p.rewarms), "num");
      cell(tr, count(p.rewarm_tokens), "num");
      tbody.appendChild(tr);
    }
  }

  async function loadTables() {
    const { data } = await getJSON("/dashboard/data/tables");
    loadRegressionRows(data.regressions);
    loadPrefixRows(data.prefixes);
    setNote("regressions", data.notes.regressions);
    setNote("prefixes", data.notes.prefixes);
  }

  // What a finding is, for keeping it open across a refresh.
  function findingKey(f) {
    return [f.kind, f.service, f.model, f.segment || "", f.group ? f.group.by + "=" + f.group.value : ""].join("\u0000");
  }

  function loadFindingRows(rows) {
    const list = document.getElementById("findings");
    const open = new Set(Array.from(list.querySelectorAll("details[open]"), (d) => d.dataset.key));
    list.replaceChildren();
    for (const f of rows) {
      const item = el("details", null, "finding");
      item.dataset.kind = f.kind;
      item.dataset.key = findingKey(f);
      item.open = open.has(item.dataset.key);
      const summary = el("summary");
      summary.appendChild(el("span", f.kind, "kind mono"));
      summary.appendChild(el("span", f.service + " · " + f.model + (f.group ? " (" + f.group.by + " " + f.group.value + ")" : "")));
      summary.appendChild(el("span", f.segment === null ? "–" : f.segment, "segment mono"));
      summary.appendChild(el("span", pct(f.share_of_prompt_tokens), "num share"));
      summary.appendChild(el("span", count(f.wasted_tokens_per_day), "num tokens"));
      summary.appendChild(el("span", f.cost, "num cost"));
      summary.appendChild(el("span", f.since.replace("T", " ").replace("Z", ""), "since"));
      item.appendChild(summary);
      const details = el("div", null, "finding-body");
      const evidence = el("ul", null, "evidence");
      for (const line of f.evidence) evidence.appendChild(el("li", line));
      details.appendChild(evidence);
      const fix = el("p", null, "fix");
      fix.appendChild(el("strong", "Fix: "));
      fix.appendChild(document.createTextNode(f.fix));
      details.appendChild(fix);
      item.appendChild(details);
      list.appendChild(item);
    }
    document.getElementById("findings-head").hidden = !rows.length;
  }

  // Each line says what to send; the server gives the docs' address (its own page).
  function loadMissing(lines) {
    const list = document.getElementById("findings-missing");
    list.replaceChildren();
    for (const line of lines) {
      const item = el("li", line.text);
      if (line.docs) {
        item.appendChild(document.createTextNode(" ("));
        const link = el("a", line.docs.title);
        link.href = line.docs.href;
        item.appendChild(link);
        item.appendChild(document.createTextNode(")"));
      }
      list.appendChild(item);
    }
    list.hidden = !lines.length;
  }

  async function loadFindings() {
    const { data } = await getJSON("/dashboard/data/findings");
    document.getElementById("findings-sub").textContent = data.sub;
    const docs = document.getElementById("findings-docs");
    docs.textContent = "What each kind means: " + data.docs.title;
    docs.href = data.docs.href;
    docs.hidden = false;
    loadFindingRows(data.findings);
    setNote("findings", data.note || data.more_note);
    loadMissing(data.missing);
  }

  // --- groups: the table (one row per value, a sparkline each) and the deploy tags ---

  // The view's URL with a group selected (clicking a value) or a table field.
  function viewHref(changes) {
    const params = new URLSearchParams(query);
    for (const [name, value] of Object.entries(changes)) {
      if (value === null) params.delete(name);
      else params.set(name, value);
    }
    const text = params.toString();
    return "/" + (text ? "?" + text : "");
  }

  function selectGroupHref(by, value) {
    return viewHref({ group_by: by, group_value: value, groups: by });
  }

  // A small inline SVG of hit rates (0..1) per bucket, the line broken where a value
  // had no requests; built as SVG elements, never parsed from text.
  function sparkline(values, bucket) {
    const width = 160, height = 28, pad = 2;
    const svg = document.createElementNS(svgNS, "svg");
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.setAttribute("width", String(width));
    svg.setAttribute("height", String(height));
    svg.setAttribute("class", "spark");
    svg.setAttribute("role", "img");
    const known = values.filter((v) => v !== null);
    const title = document.createElementNS(svgNS, "title");
    title.textContent = "hit rate per " + bucket + (known.length ? ": " + pct(Math.min(...known)) + " to " + pct(Math.max(...known)) : ": no requests");
    svg.appendChild(title);
    const step = values.length > 1 ? (width - 2 * pad) / (values.length - 1) : 0;
    let d = "";
    let open = false;
    values.forEach((v, i) => {
      if (v === null) { open = false; return; }
      const x = (pad + i * step).toFixed(1);
      const y = (pad + (1 - v) * (height - 2 * pad)).toFixed(1);
      // A lone point is a dot: a zero-length stroke with round caps.
      d += open ? " L" + x + " " + y : " M" + x + " " + y + " l0.01 0";
      open = true;
    });
    const path = document.createElementNS(svgNS, "path");
    path.setAttribute("d", d.trim());
    path.setAttribute("class", "spark-line");
    svg.appendChild(path);
    return svg;
  }

  function ms(value) {
    return value === null || value === undefined ? "–" : count(value) + " ms";
  }

  function loadGroupRows(table, selected) {
    const tbody = document.querySelector("#groups tbody");
    tbody.replaceChildren();
    document.getElementById("groups-by").textContent = table.by;
    for (const g of table.rows) {
      const tr = el("tr");
      tr.dataset.value = g.value;
      const isSelected = selected && selected.by === table.by && selected.value === g.value;
      if (isSelected) tr.className = "selected";
      const first = el("td", null, "group-value");
      const link = el("a", g.value);
      link.href = selectGroupHref(table.by, g.value);
      link.title = "Show only the requests of " + table.by + " " + g.value;
      first.appendChild(link);
      tr.appendChild(first);
      cell(tr, count(g.requests), "num");
      cell(tr, count(g.prompt_tokens), "num");
      cell(tr, pct(g.hit_rate), "num");
      cell(tr, pct(g.cacheable_fraction), "num");
      cell(tr, ms(g.ttft_hit_p50), "num");
      cell(tr, ms(g.ttft_miss_p50), "num");
      cell(tr, g.waste, "num cost");
      const spark = el("td", null, "spark-cell");
      spark.appendChild(sparkline(g.spark, table.spark_bucket));
      tr.appendChild(spark);
      tbody.appendChild(tr);
    }
    for (const tab of document.querySelectorAll("#groups-tabs a")) {
      tab.classList.toggle("active", tab.dataset.by === table.by);
    }
    document.getElementById("groups-sub").textContent = table.sub;
    setNote("groups", table.note);
  }

  async function loadCanary(canary) {
    const panel = document.getElementById("panel-canary");
    if (!canary) {
      panel.hidden = true;
      await plotlyReady;
      Plotly.purge(figureDiv("canary"));
      return;
    }
    panel.hidden = false;  // before drawing: a hidden plot has no width
    document.getElementById("canary-sub").textContent = canary.sub;
    const tags = canary.tags.map((t) =>
      t.tag + (t.canary ? " (canary)" : "") + ": " + count(t.requests) + " requests, hit rate " + pct(t.hit_rate) +
      (t.first_seen ? ", first seen " + t.first_seen.replace("T", " ").replace("Z", "") : "") + (t.drawn ? "" : " (not drawn)"));
    const unlisted = canary.not_listed ? " · and " + count(canary.not_listed) + " more tags with fewer prompt tokens" : "";
    document.getElementById("canary-tags").textContent = "In this range: " + tags.join(" · ") + unlisted + ".";
    await draw("canary", canary.figure);
  }

  // Values for the selector's field: the table's when it lists that field.
  function fillValues(table) {
    const field = document.getElementById("group-by").value;
    if (!field || field !== table.by) return;
    const list = document.getElementById("group-values");
    list.replaceChildren(...table.rows.map((g) => { const o = el("option"); o.value = g.value; return o; }));
  }

  async function loadGroups(extra) {
    const { data } = await getJSON("/dashboard/data/groups", extra);
    loadGroupRows(data.table, data.selected);
    fillValues(data.table);
    await loadCanary(data.canary);
    return data;
  }

  // A tab lists another field without reloading the page; the URL keeps it.
  for (const tab of document.querySelectorAll("#groups-tabs a")) {
    tab.addEventListener("click", (event) => {
      event.preventDefault();
      const params = new URLSearchParams(query);
      params.set("groups", tab.dataset.by);
      query = params.toString();
      history.replaceState(null, "", "/?" + query);
      let hidden = document.getElementById("groups-field");
      if (!hidden) {
        hidden = el("input");
        hidden.type = "hidden";
        hidden.name = "groups";
        hidden.id = "groups-field";
        document.getElementById("filters").appendChild(hidden);
      }
      hidden.value = tab.dataset.by;
      loadGroups().catch((error) => setNote("groups", "Could not load: " + error.message));
    });
  }

  // The selector: a field (none, scenario, tenant, deploy), then a value: the form
  // puts `group_by=...&group_value=...` in the URL, as the alerts' links do.
  const groupBy = document.getElementById("group-by");
  const groupValue = document.getElementById("group-value");
  groupBy.addEventListener("change", async () => {
    const field = groupBy.value;
    groupValue.value = "";
    if (!field) {
      groupValue.form.requestSubmit();
      return;
    }
    document.getElementById("group-value-label").hidden = false;
    groupValue.focus();
    try {
      const { data } = await getJSON("/dashboard/data/groups", { groups: field });
      fillValues(data.table);
    } catch (error) {
      // The list is a convenience: a typed value works without it.
    }
  });
  groupValue.addEventListener("change", () => {
    if (groupValue.value && groupBy.value) groupValue.form.requestSubmit();
  });

  async function loadAll() {
    const started = performance.now();
    const results = await Promise.allSettled([loadSeries(), loadCapacity(), loadTables(), loadFindings(), loadGroups()]);
    const failed = results.filter((r) => r.status === "rejected");
    for (const failure of failed) {
      const line = document.getElementById("view-line");
      line.textContent = "Could not load: " + failure.reason.message;
      line.classList.add("error");
    }
    body.dataset.drawnMs = String(Math.round(performance.now() - started));
    body.dataset.drawnAt = String(Math.round(performance.now()));
    body.dataset.drawn = failed.length ? "failed" : "true";
  }

  for (const select of document.querySelectorAll("[data-autosubmit]")) {
    select.addEventListener("change", () => {
      if (select.name === "service") {
        const model = document.querySelector('select[name="model"]');
        if (model) model.value = "";
      }
      select.form.requestSubmit();
    });
  }
  // Empty fields stay out of the URL: links stay short and canonical.
  document.getElementById("filters").addEventListener("formdata", (event) => {
    for (const [name, value] of Array.from(event.formData.entries())) {
      if (value === "") event.formData.delete(name);
    }
  });

  loadAll();
  if (live) {
    setInterval(() => { if (!document.hidden) loadAll(); }, refreshMs);
  }
})();
