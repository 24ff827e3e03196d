/* The scheduler replays: the package's own scheduler (kvtutor.serving.loop.run_serving) and its
   paged pool (kvtutor.serving.paged_trace.simulate_trace) over small traces, every step exported
   by kvtutor.book.scheduler_widget and kvtutor.book.paged_widget. The reader picks a run, then
   steps or plays it; every number shown is one of the export's, this file only lays them out.
   Needs kv-widgets.js first. */
(function () {
  "use strict";
  const W = window.kvtutorWidgets;
  const { el, fill, grouped } = W;
  const PLAY_MS = 700;

  const LABELS = {
    en: {
      servingTitle: "Scheduler replay: run_serving, step by step",
      pagedTitle: "Paged pool replay: simulate_trace, step by step",
      trace: "Trace",
      policy: "Policy",
      budget: "Prefill",
      prefix: "Prefix caching",
      trace_toy: "five toy requests, 2 slots",
      trace_long: "a {long}-token prompt among {short} short {short|request|requests}, {slots} {slots|slot|slots}",
      trace_random: "{n} {n|request|requests} of random lengths, {blocks} {blocks|block|blocks} of {size}",
      trace_shared: "{n} {n|request|requests}, {systems} system {systems|prompt|prompts}, {blocks} {blocks|block|blocks} of {size}",
      static: "static batching",
      continuous: "continuous batching",
      whole: "whole prompts",
      chunked: "chunks: at most {b} {b|token|tokens} a step",
      off: "off",
      on: "on",
      controls: "Replay controls",
      start: "Start",
      back: "Back",
      next: "Next step",
      play: "Play",
      pause: "Pause",
      slider: "Step",
      position: "step {i} of steps 0\u2013{last}",
      servingStep: "Step {step}: {run} {run|token|tokens} run ({prompt} prompt, {decoded} decode){budget}; {held} of {slots} {slots|slot|slots} held; {given} {given|token|tokens} given out.",
      ofBudget: " of a budget of {b}",
      clockStep: "This step: {ms} ms; {elapsed} ms since the first arrival.",
      clockNote: "Milliseconds: kvtutor's roofline model (serving.disagg.StepModel) of each step's chunks and decodes for GPT-2 of width {d} with {l} layers in {dtype} on the recorded {cpu} ({date}). TTFT counts steps from arrival to the first token, both included; TPOT is the mean gap between a request's tokens after its first.",
      stepsNote: "Counted in scheduler steps. TTFT counts steps from arrival to the first token, both included; TPOT is the mean gap between a request's tokens after its first.",
      slots: "Slots",
      slot: "slot {s}",
      free: "free",
      request: "request",
      state: "now",
      thisStep: "tokens run",
      cached: "in cache",
      given: "tokens out",
      ttft: "TTFT",
      tpot: "TPOT",
      steps: "{n} steps",
      oneStep: "1 step",
      stepsTpot: "{n} steps",
      ms: "{n} ms",
      arrives: "arrives at step {a}, prompt {p}, wants {w}",
      system: "system prompt {s}",
      s_future: "not arrived",
      s_waiting: "waiting for a slot",
      s_slot: "in slot {s}, no budget left for its prompt",
      s_chunk: "slot {s}: a chunk of its prompt",
      s_first: "slot {s}: prefill, first token",
      s_decode: "slot {s}: decode",
      s_held: "done, still holds slot {s}",
      s_left: "done",
      p_future: "not arrived",
      p_waiting: "waiting for blocks",
      p_admitted: "admitted: prefill",
      p_running: "running: decode",
      p_preempted: "preempted: blocks freed",
      p_finished: "last token",
      p_done: "done",
      text: "Text so far",
      totals: "The whole run: {steps} {steps|step|steps}, {tokens} {tokens|token|tokens}, {tps} tokens a step; TTFT p50 {p50} steps, p90 {p90} steps.",
      totalsClock: " In time: {ms} ms in all, TTFT p90 {ttft} ms, TPOT p50 {tpot} ms, longest gap p99 {gap} ms.",
      pagedStep: "Step {i}: {running} running; {free} of {blocks} {blocks|block|blocks} free{cached}; {preempted} {preempted|preemption|preemptions} so far; prompt positions prefilled so far {prompt}, {hit} of them found in the prefix cache{evicted}.",
      cachedFree: " ({n} of them cached, held by nobody)",
      evicted: "; {n} cached {n|block|blocks} evicted so far",
      events: "This step:",
      admitted: "admitted {names}",
      preempted: "preempted {names}",
      finished: "last token of {names}",
      nothing: "every running request decoded one token",
      pool: "The pool: {blocks} {blocks|block|blocks} of {size} {size|position|positions}",
      blockFree: "block {b}: free",
      blockCached: "block {b}: cached (named), held by nobody",
      blockHeld: "block {b}: held by {names}",
      cachedMark: "cached",
      blocksHeld: "blocks",
      used: "positions",
      hit: "found cached",
      pagedTotals: "The whole run: {steps} {steps|step|steps}, {preempted} {preempted|preemption|preemptions}, {evicted} {evicted|eviction|evictions}; {computed} prompt {computed|position|positions} computed at first prefills, {hit} found in the cache.",
      pagedNote: "One step: every running request decodes one token (a sequence whose next position opens a block takes one, preempting the newest request while none is free), then waiting requests are admitted first come, first served while their blocks fit, then finished requests free their blocks.",
    },
    zh: {
      servingTitle: "调度器回放：逐步运行 run_serving",
      pagedTitle: "分页缓存池回放：逐步运行 simulate_trace",
      trace: "请求轨迹",
      policy: "策略",
      budget: "预填充",
      prefix: "前缀缓存",
      trace_toy: "玩具模型的五个请求，2 个空位",
      trace_long: "一个 {long} 词元的提示词夹在 {short} 个短请求中，{slots} 个空位",
      trace_random: "{n} 个长度随机的请求，{blocks} 个 {size} 位置的块",
      trace_shared: "{n} 个请求，{systems} 个系统提示词，{blocks} 个 {size} 位置的块",
      static: "静态批处理",
      continuous: "连续批处理",
      whole: "整段提示词",
      chunked: "分块：每步至多 {b} 个词元",
      off: "关",
      on: "开",
      controls: "回放控制",
      start: "回到开头",
      back: "后退",
      next: "下一步",
      play: "播放",
      pause: "暂停",
      slider: "步",
      position: "第 {i} 步（步号 0\u2013{last}）",
      servingStep: "第 {step} 步：运行 {run} 个词元（提示词 {prompt} 个，解码 {decoded} 个）{budget}；占用 {holdText}；输出 {given} 个词元。",
      ofBudget: "，预算为 {b}",
      clockStep: "这一步：{ms} ms；自第一个请求到达起共 {elapsed} ms。",
      clockNote: "毫秒数：kvtutor 的屋顶线模型（serving.disagg.StepModel）按每一步的分块和解码，估算宽度 {d}、{l} 层、{dtype} 的 GPT-2 在记录的 {cpu}（{date}）上的用时。TTFT 从到达数到第一个词元，两端都算；TPOT 是第一个词元之后相邻词元的平均间隔。",
      stepsNote: "以调度步计数。TTFT 从到达数到第一个词元，两端都算；TPOT 是第一个词元之后相邻词元的平均间隔。",
      slots: "空位",
      slot: "空位 {s}",
      free: "空闲",
      request: "请求",
      state: "现在",
      thisStep: "运行的词元",
      cached: "缓存中",
      given: "已输出词元",
      ttft: "TTFT",
      tpot: "TPOT",
      steps: "{n} 步",
      oneStep: "1 步",
      stepsTpot: "{n} 步",
      ms: "{n} ms",
      arrives: "第 {a} 步到达，提示词 {p}，需要 {w}",
      system: "系统提示词 {s}",
      s_future: "尚未到达",
      s_waiting: "等待空位",
      s_slot: "在空位 {s}，本步预算已不够它的提示词",
      s_chunk: "空位 {s}：提示词的一块",
      s_first: "空位 {s}：预填充，第一个词元",
      s_decode: "空位 {s}：解码",
      s_held: "已完成，仍占着空位 {s}",
      s_left: "已完成",
      p_future: "尚未到达",
      p_waiting: "等待空闲块",
      p_admitted: "已接纳：预填充",
      p_running: "运行中：解码",
      p_preempted: "被抢占：块已释放",
      p_finished: "最后一个词元",
      p_done: "已完成",
      text: "目前的文本",
      totals: "整次运行：{steps} 步，{tokens} 个词元，每步 {tps} 个词元；TTFT p50 {p50} 步，p90 {p90} 步。",
      totalsClock: "用时：共 {ms} ms，TTFT p90 {ttft} ms，TPOT p50 {tpot} ms，最长间隔 p99 {gap} ms。",
      pagedStep: "第 {i} 步：{running} 个在运行；{blocks} 个块中 {free} 个空闲{cached}；累计抢占 {preempted} 次；累计预填充提示词位置 {prompt} 个，其中 {hit} 个在前缀缓存中找到{evicted}。",
      cachedFree: "（其中 {n} 个已缓存、无人持有）",
      evicted: "；累计逐出 {n} 个缓存块",
      events: "这一步：",
      admitted: "接纳 {names}",
      preempted: "抢占 {names}",
      finished: "{names} 的最后一个词元",
      nothing: "每个运行中的请求各解码一个词元",
      pool: "缓存池：{blocks} 个块，每块 {size} 个位置",
      blockFree: "块 {b}：空闲",
      blockCached: "块 {b}：已缓存（有名字），无人持有",
      blockHeld: "块 {b}：由 {names} 持有",
      cachedMark: "缓存",
      blocksHeld: "块数",
      used: "位置数",
      hit: "缓存命中",
      pagedTotals: "整次运行：{steps} 步，抢占 {preempted} 次，逐出 {evicted} 次；首次预填充计算了 {computed} 个提示词位置，{hit} 个在缓存中找到。",
      pagedNote: "每一步：每个运行中的请求解码一个词元（下一个位置要开新块的序列取一个块，没有空闲块时抢占最新的请求），然后按先来先服务接纳等待中的请求，只要它们的块放得下，最后已完成的请求释放它们的块。",
    },
  };

  /* A step's number as the scheduler counts it (run_serving's StepRecord.step; the paged replay's
     steps are its index), from 0. */
  const stepNumber = (run, i) => (run.steps[i].step === undefined ? i : run.steps[i].step);
  const letters = (indices, trace) => indices.map((i) => trace.requests[i].name).join(", ");
  let counter = 0;

  /* The controls every replay shares: the run pickers (built by the caller), Start, Back, Next,
     Play and a slider over the run's steps. `show(run, i)` draws step i. */
  function player(root, t, pickers, runOf, show) {
    const id = `kvw-replay-${++counter}`;
    let run = null, index = 0, timer = null;
    const button = (action, label) => el("button", { type: "button", class: "kvw-button", dataset: { action }, text: label });
    const buttons = { start: button("start", t("start")), back: button("back", t("back")),
      next: button("next", t("next")), play: button("play", t("play")) };
    const slider = el("input", { id: `${id}-step`, type: "range", min: 0, value: 0, step: 1, class: "kvw-slider", dataset: { field: "step" } });
    const position = el("span", { class: "kvw-position", "aria-live": "off" });
    const stop = () => {
      if (timer !== null) clearInterval(timer);
      timer = null;
      buttons.play.textContent = t("play");
      buttons.play.setAttribute("aria-pressed", "false");
    };
    const go = (i) => {
      index = Math.max(0, Math.min(run.steps.length - 1, i));
      update();
    };
    buttons.start.addEventListener("click", () => { stop(); go(0); });
    buttons.back.addEventListener("click", () => { stop(); go(index - 1); });
    buttons.next.addEventListener("click", () => { stop(); go(index + 1); });
    buttons.play.addEventListener("click", () => {
      if (timer !== null) return stop();
      if (index === run.steps.length - 1) go(0);
      buttons.play.textContent = t("pause");
      buttons.play.setAttribute("aria-pressed", "true");
      timer = setInterval(() => { if (index >= run.steps.length - 1) stop(); else go(index + 1); }, PLAY_MS);
    });
    slider.addEventListener("input", () => { stop(); go(Number(slider.value)); });
    for (const picker of pickers) picker.addEventListener("change", () => { stop(); choose(); });

    function choose() {
      run = runOf();
      index = 0;
      slider.max = String(run.steps.length - 1);
      update();
    }
    function update() {
      slider.value = String(index);
      // the scheduler's own step numbers, from 0, as the status line and the chapter count them
      const where = fill(t("position"), { i: stepNumber(run, index), last: stepNumber(run, run.steps.length - 1) });
      slider.setAttribute("aria-valuetext", where);
      position.textContent = where;
      buttons.back.setAttribute("aria-disabled", String(index === 0));
      buttons.start.setAttribute("aria-disabled", String(index === 0));
      buttons.next.setAttribute("aria-disabled", String(index === run.steps.length - 1));
      root.dataset.run = run.id;
      root.dataset.index = String(index);
      show(run, index);
    }
    const controls = el("div", { class: "kvw-controls", role: "group", "aria-label": t("controls") }, [
      buttons.start, buttons.back, buttons.next, buttons.play,
      el("label", { class: "kvw-slider-label", for: slider.id }, [el("span", { class: "kvw-visually-hidden", text: t("slider") }), slider]),
      position,
    ]);
    return { controls, choose };
  }

  function select(name, label, options, id) {
    const control = el("select", { id: `${id}-${name}`, dataset: { field: name } },
      options.map(([value, text]) => el("option", { value, text })));
    return { control, field: el("div", { class: "kvw-field" }, [el("label", { for: control.id, text: label }), control]) };
  }

  /* A table whose cells carry data-k (what) and data-v (the exported value) for the checks. */
  function cell(k, value, content, cls) {
    return el("td", { class: cls || "", dataset: { k, v: value === null || value === undefined ? "" : String(value) } }, content);
  }

  // ---------------------------------------------------------------- run_serving

  function renderServing(root, data) {
    const t = W.labels(LABELS);
    const id = `kvw-serving-${++counter}`;
    const traces = Object.fromEntries(data.traces.map((tr) => [tr.id, tr]));
    const traceText = (tr) => {
      if (tr.id === "toy") return t("trace_toy");
      const long = tr.requests[tr.requests.length - 1];
      return fill(t("trace_long"), { long: grouped(long.prompt), short: tr.requests.length - 1, slots: tr.slots });
    };
    const pick = {
      trace: select("trace", t("trace"), data.traces.map((tr) => [tr.id, traceText(tr)]), id),
      policy: select("policy", t("policy"), [["continuous", t("continuous")], ["static", t("static")]], id),
      budget: select("budget", t("budget"), [...new Set(data.runs.map((r) => r.budget))]
        .map((b) => [b === null ? "whole" : String(b), b === null ? t("whole") : fill(t("chunked"), { b })]), id),
    };
    const find = () => data.runs.find((r) => r.trace === pick.trace.control.value && r.policy === pick.policy.control.value
      && String(r.budget === null ? "whole" : r.budget) === pick.budget.control.value);
    function runOf() {
      // only the exported combinations can be picked; the first one left open is taken
      const tr = pick.trace.control.value;
      for (const option of pick.policy.control.options) option.disabled = !data.runs.some((r) => r.trace === tr && r.policy === option.value);
      if (pick.policy.control.selectedOptions[0].disabled) pick.policy.control.value = [...pick.policy.control.options].find((o) => !o.disabled).value;
      for (const option of pick.budget.control.options) {
        option.disabled = !data.runs.some((r) => r.trace === tr && r.policy === pick.policy.control.value
          && String(r.budget === null ? "whole" : r.budget) === option.value);
      }
      if (pick.budget.control.selectedOptions[0].disabled) pick.budget.control.value = [...pick.budget.control.options].find((o) => !o.disabled).value;
      pick.budget.control.disabled = [...pick.budget.control.options].filter((o) => !o.disabled).length < 2;
      return find();
    }
    const status = el("p", { class: "kvw-status", role: "status", "aria-live": "polite" });
    const clockLine = el("p", { class: "kvw-clock" });
    const slotsBox = el("div", { class: "kvw-slots" });
    const table = el("table", { class: "kvw-requests" });
    const textBox = el("div", { class: "kvw-texts" });
    const totals = el("p", { class: "kvw-totals" });
    const note = el("p", { class: "kvw-note" });
    const p = player(root, t, Object.values(pick).map((x) => x.control), runOf, show);
    root.classList.add("kvw-replay", "kvw-serving");
    root.append(
      el("p", { class: "kvw-title", text: t("servingTitle") }),
      el("div", { class: "kvw-pickers" }, Object.values(pick).map((x) => x.field)),
      p.controls, status, clockLine, slotsBox,
      el("div", { class: "kvw-scroll" }, table), textBox, totals, note,
    );

    function show(run, i) {
      const tr = traces[run.trace];
      const step = run.steps[i];
      const cells = run.cells[i];
      const states = data.states;
      status.textContent = fill(t("servingStep"), {
        step: step.step, run: grouped(step.run), prompt: grouped(step.prompt), decoded: step.decoded, held: step.held,
        slots: tr.slots, given: step.given, budget: run.budget === null ? "" : fill(t("ofBudget"), { b: run.budget }),
        holdText: `${step.held} / ${tr.slots} ${t("slots")}`,
      });
      status.dataset.run = String(step.run);
      status.dataset.held = String(step.held);
      status.dataset.given = String(step.given);
      clockLine.replaceChildren();
      if (tr.clock) {
        clockLine.append(el("span", { dataset: { k: "ms", v: step.ms } , text: fill(t("clockStep"), { ms: step.ms.toFixed(2), elapsed: step.elapsed_ms.toFixed(2) }) }));
      }
      // the slots, each with the request in it (after the step)
      const holder = new Array(tr.slots).fill(null);
      cells.forEach((c, r) => { if (c[4] >= 0) holder[c[4]] = r; });
      slotsBox.replaceChildren(el("span", { class: "kvw-label", text: `${t("slots")}: ` }), ...holder.map((r, s) => {
        const state = r === null ? "free" : states[cells[r][0]];
        return el("span", { class: `kvw-slot kvw-state-${state}`, dataset: { slot: s, req: r === null ? "" : r },
          title: fill(t("slot"), { s }) }, [el("span", { class: "kvw-slot-name", text: fill(t("slot"), { s }) }),
          r === null ? t("free") : tr.requests[r].name]);
      }));
      const head = el("tr", {}, ["request", "state", "thisStep", "cached", "given", "ttft", "tpot"]
        .map((k) => el("th", { scope: "col", text: t(k) })));
      const rows = cells.map((c, r) => {
        const req = tr.requests[r];
        const lat = run.latency[r];
        const state = states[c[0]];
        const given = c[3];
        const ttft = given > 0 ? lat.ttft_steps : null;
        const tpotSteps = given > 1 ? lat.tpot_steps[given - 2] : null;
        const ttftMs = given > 0 && tr.clock ? lat.ttft_ms : null;
        const tpotMs = given > 1 && tr.clock ? lat.tpot_ms[given - 2] : null;
        const timeText = (steps, ms, mean) => {
          if (steps === null) return "\u2014";
          const inSteps = mean ? fill(t("stepsTpot"), { n: steps.toFixed(2) }) : fill(t(steps === 1 ? "oneStep" : "steps"), { n: steps });
          return ms === null ? inSteps : [inSteps, el("br"), el("span", { class: "kvw-muted", text: fill(t("ms"), { n: ms.toFixed(2) }) })];
        };
        const who = [el("strong", { text: req.name }), " ", el("span", { class: "kvw-muted",
          text: fill(t("arrives"), { a: req.arrival, p: grouped(req.prompt), w: req.wants }) })];
        return el("tr", { class: `kvw-state-${state}`, dataset: { req: r } }, [
          el("th", { scope: "row" }, who),
          cell("state", state, fill(t(`s_${state}`), { s: c[4] })),
          cell("run", c[1], c[1] ? grouped(c[1]) : "\u2014", "kvw-num"),
          cell("cached", c[2], ["future", "waiting", "left"].includes(state) ? "\u2014" : grouped(c[2]), "kvw-num"),
          cell("given", given, String(given), "kvw-num"),
          cell("ttft", [ttft, ttftMs].join("|"), timeText(ttft, ttftMs, false), "kvw-num"),
          cell("tpot", [tpotSteps, tpotMs].join("|"), timeText(tpotSteps, tpotMs, true), "kvw-num"),
        ]);
      });
      table.replaceChildren(el("thead", {}, head), el("tbody", {}, rows));
      textBox.replaceChildren();
      if (tr.requests[0].words) {
        textBox.append(el("p", { class: "kvw-label", text: t("text") }), ...tr.requests.map((req, r) => {
          const given = cells[r][3];
          const state = states[cells[r][0]];
          const words = req.words.slice(0, given).map((w, k) => el("span", {
            class: `kvw-word${k === given - 1 && ["first", "decode"].includes(state) ? " kvw-word-new" : ""}`, text: w }));
          return el("p", { class: "kvw-text", dataset: { req: r } }, [el("strong", { text: `${req.name}: ` }),
            el("span", { class: "kvw-prompt", text: req.text }), ...words.flatMap((w) => [" ", w])]);
        }));
      }
      const last = i === run.steps.length - 1;
      totals.replaceChildren();
      if (last) {
        const x = run.totals;
        let text = fill(t("totals"), { steps: x.n_steps, tokens: x.n_tokens, tps: x.tokens_per_step.toFixed(2),
          p50: x.ttft_steps_p50.toFixed(1), p90: x.ttft_steps_p90.toFixed(1) });
        if (tr.clock) {
          text += fill(t("totalsClock"), { ms: x.seconds_ms.toFixed(2), ttft: x.ttft_ms_p90.toFixed(2),
            tpot: x.tpot_ms_p50.toFixed(2), gap: x.max_gap_ms_p99.toFixed(2) });
        }
        totals.textContent = text;
      }
      note.textContent = tr.clock ? fill(t("clockNote"), { d: tr.clock.d_model, l: tr.clock.n_layers,
        dtype: tr.clock.dtype, cpu: tr.clock.cpu, date: tr.clock.date }) : t("stepsNote");
    }

    pick.trace.control.value = data.traces[0].id;
    p.choose();
  }

  // ---------------------------------------------------------------- simulate_trace's paged pool

  function renderPaged(root, data) {
    const t = W.labels(LABELS);
    const id = `kvw-paged-${++counter}`;
    const traces = Object.fromEntries(data.traces.map((tr) => [tr.id, tr]));
    const traceText = (tr) => {
      const systems = new Set(tr.requests.map((r) => r.system).filter((s) => s !== undefined)).size;
      return fill(t(systems ? "trace_shared" : "trace_random"), { n: tr.requests.length, systems, blocks: tr.n_blocks, size: tr.block_size });
    };
    const pick = {
      trace: select("trace", t("trace"), data.traces.map((tr) => [tr.id, traceText(tr)]), id),
      prefix: select("prefix", t("prefix"), [["off", t("off")], ["on", t("on")]], id),
    };
    function runOf() {
      const tr = pick.trace.control.value;
      for (const option of pick.prefix.control.options) {
        option.disabled = !data.runs.some((r) => r.trace === tr && r.prefix_caching === (option.value === "on"));
      }
      if (pick.prefix.control.selectedOptions[0].disabled) pick.prefix.control.value = [...pick.prefix.control.options].find((o) => !o.disabled).value;
      pick.prefix.control.disabled = [...pick.prefix.control.options].filter((o) => !o.disabled).length < 2;
      return data.runs.find((r) => r.trace === tr && r.prefix_caching === (pick.prefix.control.value === "on"));
    }
    const status = el("p", { class: "kvw-status", role: "status", "aria-live": "polite" });
    const events = el("p", { class: "kvw-events" });
    const pool = el("div", { class: "kvw-pool" });
    const poolCaption = el("p", { class: "kvw-label" });
    const table = el("table", { class: "kvw-requests" });
    const totals = el("p", { class: "kvw-totals" });
    const p = player(root, t, Object.values(pick).map((x) => x.control), runOf, show);
    root.classList.add("kvw-replay", "kvw-paged");
    root.append(
      el("p", { class: "kvw-title", text: t("pagedTitle") }),
      el("div", { class: "kvw-pickers" }, Object.values(pick).map((x) => x.field)),
      p.controls, status, events, poolCaption, pool,
      el("div", { class: "kvw-scroll" }, table), totals, el("p", { class: "kvw-note", text: t("pagedNote") }),
    );

    function show(run, i) {
      const tr = traces[run.trace];
      const step = run.steps[i];
      const cells = run.cells[i];
      status.textContent = fill(t("pagedStep"), {
        i: stepNumber(run, i), running: step.running, free: step.free, blocks: tr.n_blocks,
        cached: run.prefix_caching ? fill(t("cachedFree"), { n: step.cached_free }) : "",
        preempted: step.preemptions, prompt: grouped(step.prompt_tokens), hit: grouped(step.cached_tokens),
        evicted: run.prefix_caching ? fill(t("evicted"), { n: step.evictions }) : "",
      });
      Object.assign(status.dataset, { running: step.running, free: step.free, cachedFree: step.cached_free,
        preemptions: step.preemptions, promptTokens: step.prompt_tokens, cachedTokens: step.cached_tokens, evictions: step.evictions });
      const happened = ["admitted", "preempted", "finished"].filter((k) => step[k].length)
        .map((k) => fill(t(k), { names: letters(step[k], tr) }));
      events.textContent = `${t("events")} ${happened.length ? happened.join("; ") : t("nothing")}.`;
      poolCaption.textContent = fill(t("pool"), { blocks: tr.n_blocks, size: tr.block_size });
      pool.replaceChildren(...step.pool.map((owners, b) => {
        const cached = owners.length === 1 && owners[0] === -1;
        const names = cached ? "" : letters(owners, tr);
        const title = owners.length === 0 ? fill(t("blockFree"), { b }) : cached ? fill(t("blockCached"), { b })
          : fill(t("blockHeld"), { b, names });
        const cls = owners.length === 0 ? "kvw-block-free" : cached ? "kvw-block-cached" : owners.length > 1 ? "kvw-block-shared" : "kvw-block-held";
        const hue = owners.length && !cached ? (owners[0] * 137) % 360 : 0;
        return el("span", { class: `kvw-block ${cls}`, title, "aria-label": title, role: "img",
          dataset: { block: b, owners: cached ? "cached" : owners.join(",") },
          style: owners.length && !cached ? `--kvw-hue: ${hue}` : null },
        [el("span", { class: "kvw-block-id", text: String(b) }), el("span", { class: "kvw-block-owner", text: cached ? t("cachedMark") : names || "\u00a0" })]);
      }));
      const head = el("tr", {}, ["request", "state", "blocksHeld", "used", "given", "hit"].map((k) => el("th", { scope: "col", text: t(k) })));
      const rows = cells.map((c, r) => {
        const req = tr.requests[r];
        const state = data.states[c[0]];
        const about = fill(t("arrives"), { a: req.arrival, p: req.prompt, w: req.wants })
          + (req.system === undefined ? "" : `, ${fill(t("system"), { s: req.system + 1 })}`);
        const inPool = ["admitted", "running", "finished"].includes(state);
        return el("tr", { class: `kvw-state-${state}`, dataset: { req: r } }, [
          el("th", { scope: "row" }, [el("strong", { text: req.name }), " ", el("span", { class: "kvw-muted", text: about })]),
          cell("state", state, t(`p_${state}`)),
          cell("blocks", c[1], inPool ? String(c[1]) : "\u2014", "kvw-num"),
          cell("used", c[2], inPool ? String(c[2]) : "\u2014", "kvw-num"),
          cell("given", c[3], String(c[3]), "kvw-num"),
          cell("hit", c[4], state === "future" || (state === "waiting" && c[3] === 0) ? "\u2014" : String(c[4]), "kvw-num"),
        ]);
      });
      table.replaceChildren(el("thead", {}, head), el("tbody", {}, rows));
      totals.textContent = "";
      if (i === run.steps.length - 1) {
        const x = run.totals;
        totals.textContent = fill(t("pagedTotals"), { steps: x.steps, preempted: x.preemptions, evicted: x.evictions,
          computed: x.first_prefill_sum, hit: x.first_cached_sum });
      }
    }

    pick.trace.control.value = data.traces[0].id;
    p.choose();
  }

  W.register("serving-replay", renderServing);
  W.register("paged-replay", renderPaged);
})();
