// The collection page (hci_envs/server/collect_routes.py): the live desktop through noVNC's RFB module, the
// recording controls, the actions as the recorder writes them (polled), and this session's episodes.
// Every URL is relative to the page, so the page works wherever the server is published (--public-url).

const here = new URL('.', location.href);               // .../collect/SESSION/SECRET/
const [sessionId, secret] = here.pathname.split('/').filter(Boolean).slice(-2);
const POLL_MS = 400;
const NEARLY = 0.9999;       // share of identical pixels above which a final screen is "nearly identical"
const $ = (selector) => document.querySelector(selector);

let episode = null;          // the episode whose actions are listed
let cursor = 0;              // where the next poll reads that episode's actions.jsonl from
let episodesKey = null;      // what the episode list was last drawn from
let last = null;             // the last state the server sent
let busy = false;            // a command of this page is under way

// -- talking to the server -------------------------------------------------------------------------------
async function api(method, path, body) {
  const init = { method, cache: 'no-store', headers: {} };
  if (method !== 'GET') {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body ?? {});
  }
  const response = await fetch(new URL(path, here), init);
  let data = null;
  try { data = await response.json(); } catch { /* no JSON body */ }
  if (!response.ok) {
    throw new Error(data?.error?.message || data?.detail || `the server answered ${response.status}`);
  }
  return data;
}

function showError(error) {
  const box = $('#error');
  box.textContent = error ? String(error.message || error) : '';
  box.hidden = !error;
}

async function run(action) {
  busy = true;
  updateButtons();
  try {
    await action();
    showError(null);
  } catch (error) {
    showError(error);
  } finally {
    busy = false;
    episodesKey = null;  // what the command changed shows in the list too
    await refresh();
  }
}

// -- the desktop ----------------------------------------------------------------------------------------------
function setDesktopStatus(state, text) {
  const status = $('#desktop-status');
  status.dataset.state = state;
  status.textContent = `desktop: ${text}`;
}

let viewerAttempts = 0;

async function loadViewer() {
  // noVNC's viewer, a tree of modules. A fetch that fails on the way (a busy machine, a connection closed as it
  // was reused) fails the import: try again, then reload the page, whose module map starts empty; only a server
  // that does not have the files is said to lack noVNC.
  const entry = new URL('../../../vnc/core/rfb.js', here);
  if (viewerAttempts) entry.searchParams.set('attempt', viewerAttempts);
  try {
    return (await import(entry.href)).default;
  } catch (error) {
    viewerAttempts += 1;
    console.warn('the noVNC viewer did not load', error);
    const found = await fetch(new URL('../../../vnc/core/rfb.js', here), { method: 'HEAD' }).catch(() => null);
    if (found && (found.status === 404 || found.status === 503)) {
      setDesktopStatus('disconnected', 'noVNC is not installed on the server (apt-get install novnc)');
      return null;
    }
    if (viewerAttempts >= 3 && !sessionStorage.getItem('viewer-reloaded')) {
      sessionStorage.setItem('viewer-reloaded', '1');
      location.reload();
      return null;
    }
    setDesktopStatus('disconnected', `the viewer did not load (${error.message || error}); trying again…`);
    // one second after the first failures, then longer, up to half a minute
    await new Promise((resolve) => setTimeout(resolve, Math.min(30000, 1000 * 2 ** Math.max(0, viewerAttempts - 3))));
    return loadViewer();
  }
}

async function connectDesktop() {
  const RFB = await loadViewer();
  if (!RFB) return;
  sessionStorage.removeItem('viewer-reloaded');
  const socket = new URL(`../../../vnc/ws/${sessionId}/${secret}`, here);
  socket.protocol = socket.protocol === 'https:' ? 'wss:' : 'ws:';
  const rfb = new RFB($('#screen'), socket.href, { shared: true });
  rfb.scaleViewport = true;
  rfb.resizeSession = false;   // the screen size belongs to the environment's start state
  rfb.focusOnClick = true;
  rfb.addEventListener('connect', () => setDesktopStatus('connected', 'connected'));
  rfb.addEventListener('disconnect', () => {
    setDesktopStatus('disconnected', 'disconnected; reconnecting…');
    setTimeout(connectDesktop, 2000);
  });
}

// -- actions --------------------------------------------------------------------------------------------------
function modifiers(action) {
  return action.modifiers?.length ? ` with ${action.modifiers.join('+')}` : '';
}

function describe(record) {
  const a = record.action;
  switch (a.type) {
    case 'click': {
      const times = { 2: 'double ', 3: 'triple ' }[a.count] || '';
      const button = a.button && a.button !== 'left' ? `${a.button} ` : '';
      const where = a.x === undefined ? 'where the pointer is' : `at (${a.x}, ${a.y})`;
      return `${times}${button}click ${where}${modifiers(a)}`;
    }
    case 'drag':
      return `drag from (${a.path[0].join(', ')}) to (${a.path[a.path.length - 1].join(', ')})${modifiers(a)}`;
    case 'scroll':
      return `scroll ${a.dy ? `${Math.abs(a.dy)} ${a.dy > 0 ? 'down' : 'up'}` : ''}` +
        `${a.dx ? ` ${Math.abs(a.dx)} ${a.dx > 0 ? 'right' : 'left'}` : ''}` +
        `${a.x === undefined ? '' : ` at (${a.x}, ${a.y})`}${modifiers(a)}`;
    case 'type_text':
      return `type ${JSON.stringify(a.text)}`;
    case 'key':
      return `key ${Array.isArray(a.keys) ? a.keys.join(', ') : a.keys}${a.repeat > 1 ? ` ×${a.repeat}` : ''}`;
    case 'mouse_move':
      return `move to (${a.x}, ${a.y})`;
    case 'wait':
      return `wait ${a.ms} ms`;
    default: {
      const { type, ...rest } = a;
      return `${type} ${JSON.stringify(rest)}`;
    }
  }
}

function showActions(actions) {
  const list = $('#actions');
  if (actions.episode !== episode || actions.restart) {  // another episode, or this one trimmed by its review
    episode = actions.episode;
    list.replaceChildren();
  }
  cursor = actions.cursor;
  for (const record of actions.items) {
    const item = document.createElement('li');
    item.value = record.index + 1;
    item.dataset.index = record.index;
    item.dataset.type = record.action.type;
    item.textContent = describe(record);
    list.append(item);
  }
  if (actions.items.length) list.lastElementChild.scrollIntoView({ block: 'nearest' });
}

// -- the agent's hand-over ---------------------------------------------------------------------------------------
function humanText(human) {
  const seconds = (value) => `${Math.round(value)} s`;
  switch (human.status) {
    case 'requested':
      return `The agent asks for a person: “${human.reason}”. Take over (or just use the desktop) within ` +
        `${seconds(human.answer_within_seconds)}; the agent waits until you hand it back.`;
    case 'held':
      return `${human.person} holds the desktop (asked: “${human.reason}”), ${seconds(human.hold_left_seconds)} ` +
        'left. Hand it back with a note when done.';
    case 'handed_back':
      return `Handed back${human.note ? `: “${human.note}”` : ''} (${human.actions.length} actions).`;
    case 'unanswered':
      return `Nobody answered the agent's request (“${human.reason}”) in time.`;
    default:
      return 'The agent has not asked for a person.';
  }
}

function showHuman(human) {
  if (!human) return;
  const box = $('#human');
  box.dataset.status = human.status;
  $('#human-text').textContent = humanText(human);
  const recent = (human.status === 'requested' || human.status === 'held') ? human.recent_actions ?? [] : [];
  const key = JSON.stringify(recent);
  const list = $('#human-recent');
  if (list.dataset.key !== key) {
    list.dataset.key = key;
    list.replaceChildren(...recent.map((r) => {
      const item = document.createElement('li');
      item.textContent = r.action;
      item.title = r.text ?? '';
      return item;
    }));
  }
}

// -- propose and accept: the agent's next action, drawn on the view, waits for the person's decision ---------------
let proposalShown = null;    // the id of the proposal whose action fills the edit box

function proposalPoint(action) {
  if (action.x !== undefined && action.y !== undefined) return [action.x, action.y];
  if (action.path?.length) return action.path[0];
  return null;
}

function showProposal(supervision) {
  if (!supervision) return;
  const box = $('#proposal');
  const proposal = supervision.proposal;
  const overriding = Boolean(proposal?.overriding);
  box.dataset.state = proposal ? (overriding ? 'overriding' : 'waiting') : supervision.on ? 'on' : 'off';
  box.dataset.proposal = proposal ? String(proposal.id) : '';
  if (document.activeElement !== $('#supervise')) $('#supervise').checked = supervision.on;
  const last = supervision.last;
  $('#proposal-text').textContent = proposal
    ? (overriding ? 'Do it yourself on the desktop, then press Done: what you do is the agent\'s answer.'
      : `The agent proposes: ${describe({ action: proposal.action })}. Accept it, edit it below, or do it yourself ` +
        `(it runs as proposed in ${Math.round(proposal.decide_within_seconds)} s).`)
    : supervision.on ? `On: the agent's next input action waits for you.${last ? ` Last: ${last.decision}.` : ''}`
      : 'Off: the agent\'s actions run at once.';
  const editBox = $('#proposal-action');
  if (proposal && proposalShown !== proposal.id) {
    proposalShown = proposal.id;
    editBox.value = JSON.stringify(proposal.action);
  }
  const waiting = Boolean(proposal) && !overriding;
  $('#proposal-accept').disabled = busy || !waiting;
  $('#proposal-edit').disabled = busy || !waiting;
  $('#proposal-override').disabled = busy || !waiting;
  $('#proposal-done').disabled = busy || !overriding;
  editBox.disabled = !waiting;
  drawProposal(waiting ? proposal.action : null);
}

function drawProposal(action) {
  // where the action would act, over the view (noVNC scales the screen into the canvas), and what it would type
  const mark = $('#proposal-mark');
  const canvas = $('#screen canvas');
  if (!action || !canvas || !last?.screen) {
    mark.hidden = true;
    return;
  }
  const panel = $('#desktop-panel').getBoundingClientRect();
  const box = canvas.getBoundingClientRect();
  const scale = box.width / last.screen.width;
  const point = proposalPoint(action) ?? [24, 24];
  mark.style.left = `${box.left - panel.left + (point[0] + 0.5) * scale}px`;
  mark.style.top = `${box.top - panel.top + (point[1] + 0.5) * scale}px`;
  mark.dataset.type = action.type;
  mark.querySelector('span').textContent = describe({ action });
  mark.hidden = false;
}

function decide(decision, extra = {}) {
  const id = Number($('#proposal').dataset.proposal);
  return run(() => api('POST', 'api/supervision', {
    decision, proposal: id, person: $('#person').value.trim() || 'a person at the collection page', ...extra }));
}

// -- state ------------------------------------------------------------------------------------------------------
function updateButtons() {
  const state = last?.recording?.state ?? 'none';
  const replaying = Boolean(last?.replaying);
  const active = state === 'recording' || state === 'paused';
  $('#record').disabled = busy || replaying || active;
  $('#pause').disabled = busy || state !== 'recording';
  $('#resume').disabled = busy || state !== 'paused';
  $('#stop').disabled = busy || !active;
  $('#discard').disabled = busy || !active;
  $('#load-task').disabled = busy || replaying || active;
  for (const button of document.querySelectorAll('.episode .buttons button')) {
    button.disabled = busy || replaying || active;
  }
  $('#accept').disabled = busy || last?.human?.status !== 'requested';
  $('#hand-back').disabled = busy || last?.human?.status !== 'held';
}

function showState(state) {
  last = state;
  $('#session').textContent = `session ${state.session}`;
  const task = state.task;
  const instruction = $('#instruction');
  instruction.dataset.task = task?.id ?? '';
  instruction.textContent = task
    ? (task.instruction ?? `Task ${task.id} (not in this server's suite: no instruction)`)
    : 'No task: demonstrate whatever you are asked to, or pick a task.';
  const select = $('#task-select');
  if (task && select.options.length && document.activeElement !== select) select.value = task.id;

  const recording = state.recording;
  const status = $('#rec-state');
  status.dataset.state = recording.state;
  status.dataset.episode = recording.episode ?? '';
  const counts = recording.episode ? ` Episode ${recording.episode}: ${recording.actions} actions.` : '';
  status.textContent = {
    none: 'Not recording.',
    recording: `Recording.${counts}`,
    paused: `Paused: what you do now is left out.${counts}`,
    stopping: `Stopping: writing the episode and its video.${counts}`,
    stopped: `Stopped.${counts}`,
  }[recording.state] ?? recording.state;
  showActions(state.actions);

  const banner = $('#banner');
  const asking = state.human?.status === 'requested';
  banner.hidden = !state.replaying && !asking;
  banner.textContent = state.replaying
    ? `Replaying ${state.replaying}: your input is ignored until it ends.`
    : asking ? `The agent asks for a person: ${state.human.reason}` : '';
  showHuman(state.human);
  showProposal(state.supervision);
  updateButtons();

  const key = JSON.stringify([state.episodes, recording.state, recording.episode]);
  if (key !== episodesKey) {
    episodesKey = key;
    loadEpisodes();
  }
}

let refreshing = null;        // the poll in flight: callers share it, so no cursor is read twice

function refresh() {
  refreshing ??= (async () => {
    const query = new URLSearchParams({ cursor: String(cursor) });
    if (episode) query.set('episode', episode);
    showState(await api('GET', `api/state?${query}`));
  })().finally(() => { refreshing = null; });
  return refreshing;
}

async function poll() {
  try {
    await refresh();
  } catch (error) {
    showError(error);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

// -- episodes ---------------------------------------------------------------------------------------------------
function percent(share) {
  return `${(share * 100).toFixed(3)}%`;
}

function pixels(share, screen) {
  return screen ? Math.round((1 - share) * screen.width * screen.height) : null;
}

function reportElement(report) {
  const box = document.createElement('div');
  box.className = 'report';
  const summary = report.summary;
  const final = document.createElement('p');
  final.className = 'verdict';
  if (summary.final_match === null || summary.final_match === undefined) {
    final.dataset.verdict = 'none';
    final.textContent = 'Replayed; no screen to compare at the end.';
  } else {
    const differing = pixels(summary.final_match, report.screen);
    // a blinking caret or a clock differs by a few dozen pixels: up to 0.01% of the screen is "nearly"
    final.dataset.verdict = summary.final_match === 1 ? 'identical'
      : summary.final_match >= NEARLY ? 'nearly-identical' : 'differs';
    final.dataset.finalMatch = String(summary.final_match);
    final.dataset.differingPixels = String(differing);
    final.textContent = summary.final_match === 1
      ? `Final screen: identical to the recording (${percent(1)}).`
      : `Final screen: ${summary.final_match >= NEARLY ? 'nearly identical' : 'differs'}: ` +
        `${percent(summary.final_match)} of pixels as recorded (${differing} pixels differ).`;
  }
  box.append(final);
  if (report.check) {
    const check = document.createElement('p');
    check.className = 'check';
    check.dataset.success = String(report.check.success);
    check.textContent = `Task ${report.check.task}: ${report.check.success ? 'done' : 'not done'} ` +
      `(score ${report.check.score}).`;
    box.append(check);
  }
  const errors = summary.errors ? `, ${summary.errors} failed` : '';
  const details = document.createElement('details');
  const title = document.createElement('summary');
  title.textContent = `${summary.steps} steps replayed${errors}; mean step match ` +
    `${summary.mean_match === null ? '-' : percent(summary.mean_match)}`;
  details.append(title);
  const table = document.createElement('table');
  table.className = 'steps';
  const head = table.insertRow();
  for (const label of ['#', 'action', 'screen match', 'late (ms)', 'error']) {
    const cell = document.createElement('th');
    cell.textContent = label;
    head.append(cell);
  }
  for (const step of report.steps) {
    const row = table.insertRow();
    row.dataset.index = step.index;
    // a step whose screen the next one shares was never captured alone: compared after the next
    const match = step.match === null ? 'shared with next' : percent(step.match);
    for (const text of [step.index, step.type, match, step.lateness_ms.toFixed(1), step.error ?? '']) {
      row.insertCell().textContent = String(text);
    }
  }
  details.append(table);
  box.append(details);
  return box;
}

function episodeElement(ep) {
  const item = document.createElement('li');
  item.className = 'episode';
  item.dataset.name = ep.name;
  const title = document.createElement('h3');
  title.textContent = ep.name;
  const info = document.createElement('p');
  info.className = 'info';
  const when = ep.started ? new Date(ep.started).toLocaleString() : '';
  info.textContent = `${ep.task ? `task ${ep.task}, ` : ''}${ep.actions ?? 0} actions, ${ep.state}. ${when}`;
  item.append(title, info);
  if (ep.video) {
    const video = document.createElement('video');
    video.controls = true;
    video.preload = 'metadata';
    video.src = new URL(`api/episodes/${encodeURIComponent(ep.name)}/video`, here).href;
    item.append(video);
  } else {
    const none = document.createElement('p');
    none.className = 'no-video';
    none.textContent = 'no video';
    item.append(none);
  }
  const buttons = document.createElement('div');
  buttons.className = 'buttons';
  const replay = document.createElement('button');
  replay.type = 'button';
  replay.className = 'replay';
  replay.textContent = 'Replay and verify';
  replay.title = 'Reset the desktop to the episode\'s start, replay it, and compare the screens';
  replay.addEventListener('click', () => run(async () => {
    const report = await api('POST', `api/episodes/${encodeURIComponent(ep.name)}/replay`);
    item.querySelector('.report')?.remove();
    item.append(reportElement(report));
  }));
  const remove = document.createElement('button');
  remove.type = 'button';
  remove.className = 'delete';
  remove.textContent = 'Delete';
  remove.addEventListener('click', () => {
    if (!confirm(`Delete episode ${ep.name}? Its folder is removed from the server.`)) return;
    run(() => api('DELETE', `api/episodes/${encodeURIComponent(ep.name)}`));
  });
  buttons.append(replay, remove);
  item.append(buttons);
  item.append(reviewElement(ep));
  if (ep.replay) item.append(reportElement(ep.replay));
  return item;
}

// -- review before submit: trim, verdict, comment; a dataset takes only what was submitted ------------------------
function reviewElement(ep) {
  const box = document.createElement('div');
  box.className = 'review';
  const review = ep.review;
  box.dataset.state = review?.state ?? 'none';
  if (!review) return box;
  if (review.state === 'submitted') {
    const done = document.createElement('p');
    done.className = 'review-state';
    const [first, last] = review.kept_steps;
    done.textContent = `Submitted: ${review.success ? 'it succeeded' : 'it did not succeed'}` +
      `${review.comment ? ` (“${review.comment}”)` : ''}; ` +
      `steps ${first + 1} to ${last + 1} of ${review.of_steps} kept.`;
    box.append(done);
    return box;
  }
  const count = ep.actions ?? 0;
  const intro = document.createElement('p');
  intro.className = 'review-state';
  intro.textContent = ep.state === 'stopped'
    ? 'Not submitted: no dataset takes it yet. Replay it, keep the steps that belong, say whether it succeeded, submit.'
    : 'Review it once the recording has stopped.';
  box.append(intro);
  if (ep.state !== 'stopped' || !count) return box;
  const steps = document.createElement('ol');
  steps.className = 'review-steps';
  api('GET', `api/episodes/${encodeURIComponent(ep.name)}/actions`).then(({ items }) => {
    steps.replaceChildren(...items.map((record) => {
      const li = document.createElement('li');
      li.textContent = `${record.source === 'agent' ? 'agent: ' : ''}${describe(record)}`;
      return li;
    }));
  }).catch(showError);
  const range = document.createElement('p');
  const number = (cls, value) => {
    const input = document.createElement('input');
    Object.assign(input, { type: 'number', min: 1, max: count, value, className: cls });
    input.setAttribute('aria-label', cls === 'first' ? 'first step kept' : 'last step kept');
    return input;
  };
  const first = number('first', 1);
  const last = number('last', count);
  range.append('Keep steps ', first, ' to ', last, ` of ${count}.`);
  const verdict = document.createElement('p');
  const choice = (value, text) => {
    const label = document.createElement('label');
    const input = Object.assign(document.createElement('input'), { type: 'radio', name: `verdict-${ep.name}`, value });
    input.className = `verdict-${value}`;
    label.append(input, ` ${text}`);
    return label;
  };
  verdict.append(choice('yes', 'It succeeded'), ' ', choice('no', 'It did not'));
  const comment = Object.assign(document.createElement('textarea'), { className: 'comment', maxLength: 4000,
    placeholder: 'a comment for whoever uses this demonstration' });
  const submit = Object.assign(document.createElement('button'), { type: 'button', className: 'submit',
    textContent: 'Submit', disabled: true });
  submit.title = 'Delete the steps left out, keep the verdict, and let datasets take the episode';
  verdict.addEventListener('change', () => { submit.disabled = false; });
  submit.addEventListener('click', () => {
    const kept = [Number(first.value) - 1, Number(last.value) - 1];
    const dropped = count - (kept[1] - kept[0] + 1);
    const question = `Submit steps ${kept[0] + 1} to ${kept[1] + 1}? The other ${dropped} are deleted.`;
    if (dropped > 0 && !confirm(question)) return;
    run(() => api('POST', `api/episodes/${encodeURIComponent(ep.name)}/submit`, {
      first: kept[0], last: kept[1], success: box.querySelector('.verdict-yes').checked, comment: comment.value }));
  });
  box.append(steps, range, verdict, comment, submit);
  return box;
}

async function loadEpisodes() {
  try {
    const { episodes } = await api('GET', 'api/episodes');
    $('#episodes').replaceChildren(...episodes.map(episodeElement));
    $('#no-episodes').hidden = episodes.length > 0;
    updateButtons();
  } catch (error) {
    showError(error);
  }
}

async function loadTasks() {
  const { tasks } = await api('GET', 'api/tasks');
  if (!tasks.length) return;
  const select = $('#task-select');
  const none = new Option('(no task: the session\'s own start)', '');
  select.replaceChildren(none, ...tasks.map((t) => {
    const option = new Option(t.id, t.id);
    option.title = t.instruction;
    return option;
  }));
  if (last?.task) select.value = last.task.id;
  $('#task-picker').hidden = false;
}

// -- wiring -------------------------------------------------------------------------------------------------------
function recording(command) {
  return () => run(() => api('POST', 'api/recording', { command, mask_text: $('#mask-text').checked }));
}

$('#record').addEventListener('click', recording('start'));
$('#pause').addEventListener('click', recording('pause'));
$('#resume').addEventListener('click', recording('resume'));
$('#stop').addEventListener('click', recording('stop'));
$('#discard').addEventListener('click', () => {
  if (!confirm('Discard this recording? It stops, and its episode folder is deleted.')) return;
  recording('discard')();
});
$('#load-task').addEventListener('click', () => run(async () => {
  const task = $('#task-select').value || null;
  await api('POST', 'api/task', { task });
}));

$('#supervise').addEventListener('change', () => run(() => api('POST', 'api/supervision', {
  on: $('#supervise').checked })));
$('#proposal-accept').addEventListener('click', () => decide('accept'));
$('#proposal-edit').addEventListener('click', () => {
  let action;
  try {
    action = JSON.parse($('#proposal-action').value);
  } catch (error) {
    showError(new Error(`the edited action is not JSON: ${error.message}`));
    return;
  }
  decide('edit', { action });
});
$('#proposal-override').addEventListener('click', () => decide('override'));
$('#proposal-done').addEventListener('click', () => decide('done'));
$('#accept').addEventListener('click', () => run(() => api('POST', 'api/human', {
  command: 'accept', person: $('#person').value.trim() || 'a person at the collection page' })));
$('#hand-back').addEventListener('click', () => run(async () => {
  await api('POST', 'api/human', { command: 'hand_back', note: $('#note').value });
  $('#note').value = '';
}));

connectDesktop();
loadTasks().catch(showError);
poll();
