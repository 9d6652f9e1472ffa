// The report page: draws window.REPORT_DATA (written by `lockstep report`)
// with Apache ECharts. Modes by URL hash: #png and #check leave their result
// in a pre element with id report-out for headless Chromium (--png, --check).
(function () {
  'use strict';
  var D = window.REPORT_DATA || { runs: [] };
  var main = document.getElementById('report');
  var charts = [];

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function section(title, note) {
    var s = el('section');
    s.appendChild(el('h2', '', title));
    if (note) s.appendChild(el('p', 'note', note));
    var grid = el('div', 'grid');
    s.appendChild(grid);
    main.appendChild(s);
    return grid;
  }

  function points(option) {
    var n = 0;
    (option.series || []).forEach(function (s) { n += (s.data || []).length; });
    return n;
  }

  function addChart(grid, id, option, tall) {
    var div = el('div', tall ? 'chart tall' : 'chart');
    div.id = 'chart-' + id;
    grid.appendChild(div);
    var chart = echarts.init(div, null, { renderer: 'canvas' });
    option.animation = false;
    chart.setOption(option);
    charts.push({ id: id, chart: chart, points: points(option), option: option });
  }

  // For --check: how the x axis is drawn, and the marked lines (epoch ends, rungs).
  function axisKind(a) {
    if (a.type === 'log') return 'log' + (a.logBase || 10);
    if (a.type === 'value' && a.integer) return 'integer';
    return a.type || 'value';
  }

  function marks(option) {
    var n = 0;
    option.series.forEach(function (s) { n += ((s.markLine || {}).data || []).length; });
    return n;
  }

  // A series name (a run, a status) given two colours in two charts.
  function colourConflicts() {
    var seen = {}, out = [];
    charts.forEach(function (c) {
      c.option.series.forEach(function (s) {
        var color = (s.itemStyle || {}).color;
        if (typeof color !== 'string') return;
        var prev = seen[s.name];
        if (!prev) seen[s.name] = { color: color, chart: c.id };
        else if (prev.color !== color)
          out.push('series "' + s.name + '" is ' + prev.color + ' in ' + prev.chart + ' but ' + color + ' in ' + c.id);
      });
    });
    return out;
  }

  function base(title, xName, yName, xType, yType) {
    return {
      title: { text: title, left: 8, top: 4, textStyle: { fontSize: 14 } },
      tooltip: { trigger: 'item', confine: true },
      legend: { type: 'scroll', bottom: 2 },
      grid: { left: 64, right: 28, top: 44, bottom: 76 },
      toolbox: { right: 10, feature: { dataZoom: {}, restore: {}, saveAsImage: {} } },
      dataZoom: [{ type: 'inside', xAxisIndex: 0 }],
      xAxis: { type: xType || 'value', name: xName, nameLocation: 'middle', nameGap: 26, scale: true },
      yAxis: { type: yType || 'value', name: yName, nameLocation: 'middle', nameGap: 46, scale: true },
      series: []
    };
  }

  function line(name, data, extra) {
    var s = { name: name, type: 'line', data: data, showSymbol: data.length < 60, symbolSize: 5 };
    for (var k in extra || {}) s[k] = extra[k];
    return s;
  }

  function num(x, digits) { return typeof x === 'number' ? x.toPrecision(digits || 4) : '-'; }

  // One colour per run (by its place among the inputs of its kind) and per
  // sweep status, the same in every chart; --check fails on a name drawn in
  // two colours (colourConflicts).
  var palette = ['#3b6fd6', '#e39a2d', '#2e9e5b', '#d2413a', '#8e44ad', '#17a2b8', '#7a6a53', '#c2185b'];
  function paletteColor(i) { return palette[i % palette.length]; }
  function colored(color, extra) {
    var s = { itemStyle: { color: color }, lineStyle: { color: color } };
    for (var k in extra || {}) s[k] = extra[k];
    return s;
  }
  // An epoch (or rung) axis: whole numbers only, no 1.2, 1.4 ticks.
  function integerAxis(axis) {
    axis.minInterval = 1;
    axis.axisLabel = { formatter: function (v) { return Number.isInteger(v) ? String(v) : ''; } };
    axis.integer = true;  // read back by --check
  }
  function isStep(m) { return m.kind === 'step'; }
  function epochRows(r) { return (r.metrics || []).filter(function (m) { return !isStep(m); }); }
  function stepRows(r) { return (r.metrics || []).filter(isStep); }

  function bytes(b) {
    var u = ['B', 'KiB', 'MiB', 'GiB'], i = 0;
    while (b >= 1024 && i < 3) { b /= 1024; i++; }
    return (b % 1 ? b.toFixed(1) : b) + ' ' + u[i];
  }

  // ---- Training runs (main job --run-dir, metrics files)
  function drawTraining(runs) {
    runs = runs.filter(function (r) { return (r.metrics || []).length; });
    if (!runs.length) return;
    var grid = section('Training', 'One colour per run in every chart; per-epoch values and, where the run logged them (--log-every), per-step rows from metrics.jsonl (rank 0). Dashed: epoch ends. Drag to zoom, click legend entries to hide runs.');
    function perEpoch(id, title, field, yName, x) {
      var o = base(title, x === 'step' ? 'optimizer step' : 'epoch', yName);
      o.tooltip.trigger = 'axis';
      if (x !== 'step') integerAxis(o.xAxis);
      runs.forEach(function (r, i) {
        o.series.push(line(r.name, epochRows(r).filter(function (m) { return typeof m[field] === 'number'; })
          .map(function (m) { return [m[x || 'epoch'], m[field]]; }), colored(paletteColor(i))));
      });
      addChart(grid, id, o);
    }
    perEpoch('train-loss', 'Training loss per epoch', 'train_loss', 'loss');
    perEpoch('test-accuracy', 'Test accuracy per epoch', 'test_accuracy', 'accuracy');
    perEpoch('throughput', 'Throughput per epoch', 'samples_per_s', 'samples/s');
    var logged = runs.filter(function (r) { return stepRows(r).length; });
    if (!logged.length) {  // runs from before --log-every: the epoch points against steps
      perEpoch('train-loss-step', 'Training loss against optimizer steps', 'train_loss', 'loss', 'step');
      return;
    }
    perStep(grid, runs, 'loss-per-step', 'Training loss per logged step (rank 0)', 'loss', 'loss', true);
    perStep(grid, runs, 'lr-per-step', 'Learning rate', 'lr', 'learning rate');
    perStep(grid, runs, 'grad-norm-per-step', 'Gradient norm (after the allreduce)', 'grad_norm', 'L2 norm');
    perStep(grid, runs, 'comm-wait-per-step', 'Share of the step in the optimizer step (gradient wait + update)', 'comm_wait_share', 'share of step time');
    perRank(grid, runs);
  }

  // One line per run against optimizer steps; `boundaries` marks each
  // epoch's last step (from the epoch rows) with a dashed line.
  function perStep(grid, runs, id, title, field, yName, boundaries) {
    var o = base(title, 'optimizer step', yName);
    o.tooltip.trigger = 'axis';
    runs.forEach(function (r, i) {
      var rows = stepRows(r).filter(function (m) { return typeof m[field] === 'number'; });
      if (!rows.length) return;
      var s = line(r.name, rows.map(function (m) { return [m.step, m[field]]; }), colored(paletteColor(i)));
      if (boundaries) {
        var marks = epochRows(r).filter(function (m) {  // not the target line, which repeats an epoch
          return typeof m.step === 'number' && typeof m.epoch === 'number' && m.train_loss !== undefined;
        }).map(function (m) { return { xAxis: m.step, name: 'epoch ' + m.epoch }; });
        s.markLine = { silent: true, symbol: 'none', data: marks,
          lineStyle: { type: 'dashed', color: paletteColor(i), opacity: 0.6 },
          label: { formatter: function (p) { return p.name; }, fontSize: 10 } };
      }
      o.series.push(s);
    });
    if (o.series.length) addChart(grid, id, o);
  }

  // --log-ranks: each rank's step time (one chart per run: ranks are lines).
  function perRank(grid, runs) {
    runs.forEach(function (r, i) {
      var rows = stepRows(r).filter(function (m) { return (m.ranks || []).length; });
      if (!rows.length) return;
      var o = base('Step time per rank' + (runs.length > 1 ? ': ' + r.name : ''), 'optimizer step', 'ms per step');
      o.tooltip.trigger = 'axis';
      rows[0].ranks.forEach(function (_, k) {
        o.series.push(line('rank ' + k, rows.map(function (m) { return [m.step, (m.ranks[k] || {}).step_ms]; })));
      });
      addChart(grid, 'rank-step-time-' + i, o);
    });
  }

  // ---- Communication, from engine timelines
  function drawCommunication(runs) {
    runs = runs.filter(function (r) { return r.timeline; });
    if (!runs.length) return;
    var grid = section('Communication', 'From the engine timeline (timeline.json): the share of the timeline\'s span during which any collective phase was in flight, and the tensors whose collectives took longest.');
    var o = base('Communication share of wall time', '', '% of timeline span', 'category');
    o.xAxis.data = runs.map(function (r) { return r.name; });
    o.yAxis.max = 100;
    o.yAxis.scale = false;
    var all = ofKind('train').filter(function (r) { return (r.metrics || []).length; });
    o.series.push({ name: 'collective in flight', type: 'bar', data: runs.map(function (r) {
      var at = all.indexOf(r);  // the run's colour in the training charts
      return { value: +(100 * r.timeline.busy_us / Math.max(1, r.timeline.span_us)).toFixed(2),
        itemStyle: { color: at >= 0 ? paletteColor(at) : '#888' } }; }) });
    addChart(grid, 'comm-share', o);
    runs.forEach(function (r, i) {
      var top = r.timeline.top.slice().reverse();
      var t = base('Top collectives by time: ' + r.name, 'ms', '', 'value', 'category');
      t.grid.left = 160;
      t.yAxis.data = top.map(function (x) { return x.name; });
      t.yAxis.nameGap = 10;
      t.series.push({ name: 'all phases', type: 'bar', data: top.map(function (x) { return +(x.total_us / 1e3).toFixed(3); }) });
      t.series.push({ name: 'COLLECTIVE phase', type: 'bar', data: top.map(function (x) { return +(x.collective_us / 1e3).toFixed(3); }) });
      addChart(grid, 'top-collectives-' + i, t);
    });
  }

  // ---- lockstep bench --json (several files overlaid)
  function drawBench(runs) {
    runs = runs.filter(function (r) { return (r.bench || []).length; });
    if (!runs.length) return;
    var grid = section('Collective benchmarks', 'lockstep bench --json lines; bus bandwidth as nccl-tests define it. One line per input file and collective/backend/np.');
    var bw = base('Bus bandwidth against message size', 'bytes per rank', 'GB/s', 'log');
    var lat = base('Latency (median) against message size', 'bytes per rank', 'microseconds', 'log', 'log');
    bw.xAxis.axisLabel = lat.xAxis.axisLabel = { formatter: bytes };
    bw.tooltip.formatter = lat.tooltip.formatter = function (p) {
      return p.seriesName + '<br>' + bytes(p.value[0]) + ': ' + num(p.value[1]);
    };
    runs.forEach(function (r) {
      var groups = {};
      r.bench.forEach(function (b) {
        var key = r.name + ' ' + b.op + ' ' + b.backend + ' np' + b.np;
        (groups[key] = groups[key] || []).push(b);
      });
      Object.keys(groups).forEach(function (k) {
        bw.series.push(line(k, groups[k].map(function (b) { return [b.bytes, b.busbw_gbps]; })));
        lat.series.push(line(k, groups[k].map(function (b) { return [b.bytes, b.median_us]; })));
      });
    });
    addChart(grid, 'bench-busbw', bw);
    addChart(grid, 'bench-latency', lat);
  }

  // ---- lockstep plan --json (several files overlaid) and plan validate --json
  function drawPlan(runs) {
    runs = runs.filter(function (r) { return (r.plan || []).length; });
    if (!runs.length) return;
    var grid = section('Planner predictions', 'lockstep plan --json: one line per input file (and network, where a file holds several); step time dashed: the exposed communication (not hidden behind backward).');
    var eff = base('Scaling efficiency against nodes', 'nodes (log2)', 'efficiency', 'log');
    var step = base('Predicted step time against nodes', 'nodes (log2)', 'ms', 'log');
    [eff, step].forEach(function (o) {  // a tick at every power of two
      o.xAxis.logBase = 2;
      o.xAxis.interval = 1;
      o.xAxis.scale = false;
    });
    var n = 0;
    eff.yAxis.min = 0;
    eff.yAxis.scale = false;
    eff.tooltip.formatter = step.tooltip.formatter = function (p) {
      return p.seriesName + '<br>' + p.value[0] + ' nodes: ' + num(p.value[1]);
    };
    runs.forEach(function (r) {
      var groups = {}, names = [];
      r.plan.forEach(function (p) {
        var key = String(p.network);
        if (!groups[key]) { groups[key] = []; names.push(key); }
        groups[key].push(p);
      });
      names.forEach(function (k) {
        var name = r.name + (names.length > 1 ? ' ' + k : ''), g = groups[k], color = paletteColor(n++);
        var pts = function (field) { return g.map(function (p) { return [p.nodes, p[field]]; }); };
        var solid = { itemStyle: { color: color }, lineStyle: { color: color } };
        eff.series.push(line(name, pts('efficiency'), solid));
        step.series.push(line(name + ' step', pts('step_ms'), solid));
        step.series.push(line(name + ' exposed comm', pts('exposed_comm_ms'),
          { itemStyle: { color: color }, lineStyle: { color: color, type: 'dashed' } }));
      });
    });
    addChart(grid, 'plan-efficiency', eff);
    addChart(grid, 'plan-step', step);
  }

  function drawValidate(runs) {
    runs = runs.filter(function (r) { return (r.validate || []).length; });
    if (!runs.length) return;
    var grid = section('Planner validation', 'lockstep plan validate --json: measured and predicted step (medians over rounds) per point, and every round\'s error with the ±10% band.');
    var labels = [], measured = [], predicted = [], rounds = [], medians = [];
    runs.forEach(function (r) {
      r.validate.forEach(function (v) {
        var label = (runs.length > 1 ? r.name + ' ' : '') + 'np ' + v.np +
          (v.network && v.network !== 'none' ? ' ' + v.network : '');
        labels.push(label);
        measured.push(v.measured_step_ms);
        predicted.push(v.predicted_step_ms);
        medians.push([label, v.error_pct]);
        (v.error_rounds_pct || []).forEach(function (e) { rounds.push([label, e]); });
      });
    });
    var st = base('Measured and predicted step per point', '', 'ms (median over rounds)', 'category');
    st.xAxis.data = labels;
    st.yAxis.scale = false;
    st.tooltip.trigger = 'axis';
    st.series.push({ name: 'measured', type: 'bar', data: measured });
    st.series.push({ name: 'predicted', type: 'bar', data: predicted });
    var err = base('Prediction error per point', '', '% (predicted − measured) / measured', 'category');
    err.xAxis.data = labels;
    err.yAxis.scale = false;  // the band's edges stay in view
    err.yAxis.min = function (v) { return Math.min(-15, Math.floor(v.min)); };
    err.yAxis.max = function (v) { return Math.max(15, Math.ceil(v.max)); };
    err.tooltip.formatter = function (p) { return p.seriesName + '<br>' + p.value[0] + ': ' + num(p.value[1], 3) + '%'; };
    err.series.push({ name: 'each round', type: 'scatter', data: rounds, symbolSize: 7, itemStyle: { opacity: 0.6 },
      markArea: { silent: true, itemStyle: { color: 'rgba(128, 128, 128, 0.15)' }, data: [[{ yAxis: -10 }, { yAxis: 10 }]] } });
    err.series.push({ name: 'median', type: 'scatter', symbol: 'diamond', data: medians, symbolSize: 13 });
    addChart(grid, 'validate-step', st);
    addChart(grid, 'validate-error', err);
  }

  // ---- Sweeps
  var statusColor = { completed: '#3b6fd6', stopped: '#e39a2d', failed: '#d2413a', timeout: '#8e44ad' };

  function sweepTrials(r) {
    var trials = {};
    (r.journal || []).forEach(function (e) {
      if (e.trial === undefined) return;
      var t = trials[e.trial] = trials[e.trial] || { id: e.trial, rungs: [] };
      if (e.event === 'trial') t.params = e.params;
      if (e.event === 'rung') t.rungs.push(e);
      if (e.event === 'end') { t.status = e.status; t.value = e.value; t.values = e.values || []; t.epochs = e.epochs; t.reason = e.reason; }
    });
    return Object.keys(trials).map(function (k) { return trials[k]; }).filter(function (t) { return t.status; });
  }

  function lastOf(curve, field) {
    var v = (curve || []).filter(function (m) { return typeof m[field] === 'number'; });
    return v.length ? v[v.length - 1][field] : undefined;
  }

  // A choice's axis: numbers whose ratios are all powers of two (batch
  // sizes) on a log2 axis, anything else as categories in sorted order; a
  // numeric range on a linear or log axis as its type says.
  function paramAxis(spec) {
    if (spec.type !== 'choice') return { type: spec.type === 'loguniform' || spec.log ? 'log' : 'value' };
    var v = spec.values, numeric = v.every(function (x) { return typeof x === 'number'; });
    if (numeric && v.every(function (x) { return x > 0 && Number.isInteger(Math.log2(x / Math.min.apply(null, v))); }))
      return { type: 'log', logBase: 2 };
    var sorted = numeric ? v.slice().sort(function (a, b) { return a - b; }) : v;
    return { type: 'category', data: sorted.map(String) };
  }

  function applyParamAxis(axis, a) {
    axis.type = a.type;
    if (a.logBase) {  // a third of a doubling of room each side: no half-drawn symbols at the edges
      axis.logBase = a.logBase;
      axis.scale = false;
      axis.min = function (v) { return v.min / 1.26; };
      axis.max = function (v) { return v.max * 1.26; };
      axis.axisLabel = { showMinLabel: false, showMaxLabel: false };
    }
    if (a.data) axis.data = a.data;
  }

  var runSymbols = ['circle', 'triangle', 'diamond', 'rect', 'pin', 'arrow'];

  function drawSweeps(runs) {
    if (!runs.length) return;
    runs.forEach(function (r) { r.trials = sweepTrials(r); });
    var metric = runs[0].run.metric || 'value';
    var grid = section('Sweeps', runs.map(function (r) {
      return r.name + ': ' + r.trials.length + ' trials, ' + r.run.scheduler + ', ' + r.run.metric + ' (' + r.run.mode + ')' +
        (r.results && r.results.best ? ', best trial ' + r.results.best.trial + ' = ' + num(r.results.best.value) : '');
    }).join(' · ') + '. Colour: the trial\'s status, the same in every chart' + (runs.length > 1 ? '; symbol: the sweep.' : '.'));
    var params = {};
    runs.forEach(function (r) { Object.keys(r.run.space || {}).forEach(function (p) { params[p] = r.run.space[p]; }); });
    Object.keys(params).forEach(function (p) {
      var axis = paramAxis(params[p]), categorical = axis.type === 'category';
      var o = base(metric + ' against ' + p, p, metric);
      var tp = base('Throughput (last epoch) against ' + p, p, 'samples/s');
      applyParamAxis(o.xAxis, axis);
      applyParamAxis(tp.xAxis, axis);
      o.yAxis.boundaryGap = tp.yAxis.boundaryGap = ['8%', '8%'];  // whole symbols at the edges
      runs.forEach(function (r, ri) {
        ['completed', 'stopped', 'failed', 'timeout'].forEach(function (status) {
          var ts = r.trials.filter(function (t) { return t.status === status && t.params && p in t.params; });
          var x = function (t) { return categorical ? String(t.params[p]) : t.params[p]; };
          var pts = ts.filter(function (t) { return typeof t.value === 'number'; }).map(function (t) {
            return { value: [x(t), t.value], trial: t };
          });
          var name = (runs.length > 1 ? r.name + ' ' : '') + status;
          var style = { name: name, type: 'scatter', symbolSize: 10, symbol: runSymbols[ri % runSymbols.length],
            itemStyle: { color: statusColor[status] } };
          if (pts.length) o.series.push(Object.assign({ data: pts }, style));
          var tps = ts.map(function (t) { return { value: [x(t), lastOf(epochRows({ metrics: (r.curves || {})[t.id] }), 'samples_per_s')], trial: t }; })
            .filter(function (d) { return typeof d.value[1] === 'number'; });
          if (tps.length) tp.series.push(Object.assign({ data: tps }, style));
        });
      });
      var tip = function (d) {
        var t = d.data.trial;
        return 'trial ' + t.id + ' (' + t.status + ', ' + t.epochs + ' epochs): ' + num(d.value[1]) + '<br>' +
          Object.keys(t.params).map(function (k) { return k + ' = ' + t.params[k]; }).join('<br>');
      };
      o.tooltip.formatter = tp.tooltip.formatter = tip;
      addChart(grid, 'sweep-' + p, o);
      if (tp.series.length) addChart(grid, 'sweep-' + p + '-throughput', tp);
    });
    runs.forEach(function (r, i) {
      var o = base('Every trial per epoch' + (runs.length > 1 ? ': ' + r.name : '') +
        ((r.run.rungs || []).length ? ' (ASHA rungs dashed)' : ''), 'epoch', metric);
      o.tooltip.trigger = 'item';
      integerAxis(o.xAxis);
      r.trials.forEach(function (t) {
        var data = (t.values || []).map(function (v, e) { return [e + 1, v]; }).filter(function (d) { return d[1] !== null; });
        // Named by status: the legend then toggles a status, in its colour.
        o.series.push(line(t.status, data, colored(statusColor[t.status],
          { lineStyle: { color: statusColor[t.status], width: 1.5 }, showSymbol: true, trial: t.id })));
      });
      o.tooltip.formatter = function (d) {
        return 'trial ' + o.series[d.seriesIndex].trial + ' (' + d.seriesName + '): epoch ' + d.value[0] + ', ' + num(d.value[1]);
      };
      if ((r.run.rungs || []).length && o.series.length)
        o.series[0].markLine = { silent: true, symbol: 'none', lineStyle: { type: 'dashed', color: '#999' },
          data: r.run.rungs.map(function (x) { return { xAxis: x }; }) };
      addChart(grid, 'sweep-curves-' + i, o);
    });
  }

  // ---- Large-batch study: accuracy against the global batch, per rule
  function trimmedMean(v) {
    v = v.slice().sort(function (a, b) { return a - b; });
    if (v.length >= 3) v = v.slice(1, v.length - 1);
    return v.reduce(function (a, b) { return a + b; }, 0) / v.length;
  }

  function drawLargeBatch(runs) {
    runs.forEach(function (r, i) {
      var res = r.results || [];
      if (!res.length) return;
      var grid = section('Large-batch study' + (runs.length > 1 ? ': ' + r.name : ''),
        'Test accuracy after ' + res[0].epochs + ' epochs on ' + res[0].train_samples + ' samples; line: mean without the best and worst seed, dots: each seed.');
      var rules = [], batches = [];
      res.forEach(function (x) {
        if (rules.indexOf(x.rule) < 0) rules.push(x.rule);
        if (batches.indexOf(x.batch) < 0) batches.push(x.batch);
      });
      batches.sort(function (a, b) { return a - b; });
      var o = base('Accuracy against global batch', 'global batch (log scale)', 'test accuracy', 'log');
      o.xAxis.logBase = 2;
      var table = el('table'), head = el('tr');
      head.appendChild(el('th', 'l', 'batch'));
      rules.forEach(function (rule) { head.appendChild(el('th', '', rule)); });
      table.appendChild(head);
      rules.forEach(function (rule, k) {
        var mean = [], seeds = [], color = paletteColor(k);
        batches.forEach(function (b) {
          var v = res.filter(function (x) { return x.rule === rule && x.batch === b; }).map(function (x) { return x.accuracy; });
          if (!v.length) return;
          mean.push([b, +trimmedMean(v).toFixed(4)]);
          v.forEach(function (a) { seeds.push([b, a]); });
        });
        o.series.push(line(rule, mean, colored(color, { showSymbol: true })));
        o.series.push({ name: rule, type: 'scatter', data: seeds, symbolSize: 5, itemStyle: { color: color, opacity: 0.5 } });
      });
      batches.forEach(function (b) {
        var tr = el('tr');
        tr.appendChild(el('td', 'l', String(b)));
        rules.forEach(function (rule) {
          var v = res.filter(function (x) { return x.rule === rule && x.batch === b; }).map(function (x) { return x.accuracy; });
          tr.appendChild(el('td', '', v.length ? num(trimmedMean(v), 4) + ' (' + v.length + ' seeds, ' + num(Math.min.apply(null, v), 3) + '–' + num(Math.max.apply(null, v), 3) + ')' : '-'));
        });
        table.appendChild(tr);
      });
      addChart(grid, 'large-batch-' + i, o, true);
      grid.parentNode.appendChild(table);
    });
  }

  // ---- Lab: gradient descent vs SGD vs mini-batch on linear regression
  function drawLabGd(runs) {
    runs.forEach(function (r, i) {
      var lines = r.lab || [], surface = lines.filter(function (x) { return x.type === 'surface'; })[0];
      var steps = lines.filter(function (x) { return x.type === 'step'; });
      if (!steps.length) return;
      var methods = [];
      steps.forEach(function (s) { if (methods.indexOf(s.method) < 0) methods.push(s.method); });
      var grid = section('Lab: gradient descent, SGD and mini-batch SGD' + (runs.length > 1 ? ': ' + r.name : ''),
        'Linear regression y = w·x + b on synthetic data; the same learning rate and number of samples seen per method. Loss over the whole data set.');
      var bySteps = base('Loss against steps', 'step', 'mean squared error', 'value', 'log');
      var byTime = base('Loss against time', 'seconds', 'mean squared error', 'value', 'log');
      var path = base('Path over the loss surface', 'w', 'b');
      path.tooltip.formatter = function (p) { return p.seriesName + ': w ' + num(p.value[0]) + ', b ' + num(p.value[1]) + (p.value[2] !== undefined ? ', loss ' + num(p.value[2]) : ''); };
      if (surface) {
        var cells = [], max = 0, min = Infinity;
        surface.w.forEach(function (w, a) { surface.b.forEach(function (b, c) {
          var l = Math.log10(surface.loss[a][c]); cells.push([w, b, l]); max = Math.max(max, l); min = Math.min(min, l); }); });
        path.visualMap = { min: min, max: max, dimension: 2, seriesIndex: 0, calculable: true, right: 0, top: 40,
          text: ['log10 loss', ''], inRange: { color: ['#f7fbff', '#c6dbef', '#6baed6', '#2171b5', '#08306b'] } };
        path.grid.right = 90;
        path.xAxis.scale = path.yAxis.scale = false;
        path.xAxis.min = surface.w[0]; path.xAxis.max = surface.w[surface.w.length - 1];
        path.yAxis.min = surface.b[0]; path.yAxis.max = surface.b[surface.b.length - 1];
        path.xAxis.axisLabel = path.yAxis.axisLabel = { showMinLabel: false, showMaxLabel: false };
        var dw = (surface.w[1] - surface.w[0]) / 2, db = (surface.b[1] - surface.b[0]) / 2;
        path.series.push({ name: 'loss surface', type: 'custom', data: cells, silent: true, z: 1,
          encode: { x: 0, y: 1 },
          renderItem: function (params, api) {  // one cell, coloured by the visual map
            var a = api.coord([api.value(0) - dw, api.value(1) + db]), c = api.coord([api.value(0) + dw, api.value(1) - db]);
            return { type: 'rect', shape: { x: a[0], y: a[1], width: c[0] - a[0] + 0.5, height: c[1] - a[1] + 0.5 },
              style: { fill: api.visual('color') } };
          } });
      }
      methods.forEach(function (m, k) {
        var s = steps.filter(function (x) { return x.method === m; }), color = paletteColor(k);
        bySteps.series.push(line(m, s.map(function (x) { return [x.step, x.loss]; }), colored(color)));
        byTime.series.push(line(m, s.map(function (x) { return [x.time_s, x.loss]; }), colored(color)));
        path.series.push(line(m, s.map(function (x) { return [x.w, x.b, x.loss]; }),
          colored(color, { z: 3, showSymbol: false, lineStyle: { color: color, width: 2 } })));
      });
      path.legend.data = methods;
      addChart(grid, 'lab-gd-loss-steps-' + i, bySteps);
      addChart(grid, 'lab-gd-loss-time-' + i, byTime);
      addChart(grid, 'lab-gd-path-' + i, path, true);
    });
  }

  function ofKind(k) { return D.runs.filter(function (r) { return r.kind === k; }); }

  function summary() {
    var kinds = {};
    D.runs.forEach(function (r) { kinds[r.kind] = (kinds[r.kind] || 0) + 1; });
    document.getElementById('summary').textContent = 'Generated ' + D.generated + ' from ' + D.runs.length + ' input(s): ' +
      Object.keys(kinds).map(function (k) { return kinds[k] + ' ' + k; }).join(', ') + '. Every chart is interactive: hover for values, drag or scroll to zoom, click legend entries to hide series.';
  }

  // Coloured pixels inside the plot area (sampled): axes, labels and the
  // title are grey, so only drawn series count.
  function painted(chart) {
    var canvas = chart.getDom().querySelector('canvas');
    if (!canvas) return 0;
    var scale = canvas.width / chart.getDom().clientWidth, rect = { x: 0, y: 0, width: canvas.width / scale, height: canvas.height / scale };
    try { rect = chart.getModel().getComponent('grid', 0).coordinateSystem.getRect(); } catch (e) { /* no grid */ }
    var x0 = Math.floor(rect.x * scale), y0 = Math.floor(rect.y * scale);
    var w = Math.max(1, Math.floor(rect.width * scale)), h = Math.max(1, Math.floor(rect.height * scale));
    var data = canvas.getContext('2d').getImageData(x0, y0, w, h).data, n = 0;
    for (var i = 0; i < data.length; i += 8) {
      var max = Math.max(data[i], data[i + 1], data[i + 2]), min = Math.min(data[i], data[i + 1], data[i + 2]);
      if (data[i + 3] > 0 && max - min > 40) n++;
    }
    return n;
  }

  function output(result) {
    var pre = el('pre', '', JSON.stringify(result));
    pre.id = 'report-out';
    document.body.appendChild(pre);
  }

  summary();
  var kinds = ['train', 'sweep', 'large-batch', 'bench', 'lab-gd', 'plan', 'plan-validate'];
  D.runs.forEach(function (r) {
    if (kinds.indexOf(r.kind) < 0) console.warn('lockstep report: no charts for kind ' + r.kind);
  });
  drawTraining(ofKind('train'));
  drawCommunication(ofKind('train'));
  drawSweeps(ofKind('sweep'));
  drawLargeBatch(ofKind('large-batch'));
  drawLabGd(ofKind('lab-gd'));
  drawBench(ofKind('bench'));
  drawPlan(ofKind('plan'));
  drawValidate(ofKind('plan-validate'));
  if (!charts.length) main.appendChild(el('p', '', 'Nothing to plot in these inputs.'));
  window.addEventListener('resize', function () { charts.forEach(function (c) { c.chart.resize(); }); });

  var mode = location.hash.replace('#', '');
  if (mode === 'png') {
    var images = {};
    charts.forEach(function (c) { images[c.id] = c.chart.getDataURL({ type: 'png', pixelRatio: 2, backgroundColor: '#fff' }); });
    output({ charts: images });
  } else if (mode === 'check') {
    output({ charts: charts.map(function (c) {
      return { id: c.id, points: c.points, painted: painted(c.chart), x: axisKind(c.option.xAxis), marks: marks(c.option) };
    }), errors: (window.__reportErrors || []).concat(colourConflicts()) });
  }
})();
