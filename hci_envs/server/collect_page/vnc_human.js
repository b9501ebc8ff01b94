// Injected into the noVNC page (vnc_url, vnc_routes.py): a control viewer sees the agent's request for a person
// (the reason and the agent's last actions) in a banner above the desktop, and can hand the desktop back with a
// note. It reads the session and its control secret from the page's own WebSocket path and asks the collection
// page's routes, which that secret opens (a view-only secret is refused there: view-only viewers see nothing).
const params = new URLSearchParams(location.search);
const parts = (params.get('path') || '').split('/').filter(Boolean);
const at = parts.lastIndexOf('ws');
if (at > 0 && parts.length >= at + 3 && parts[at - 1] === 'vnc') {
  const prefix = parts.slice(0, at - 1).join('/');
  const base = new URL(`${prefix ? `/${prefix}` : ''}/collect/${parts[at + 1]}/${parts[at + 2]}/`, location.origin);
  const banner = document.createElement('div');
  banner.id = 'hci-envs-human';
  banner.hidden = true;
  banner.setAttribute('role', 'status');
  banner.style.cssText = 'position:fixed;top:0;left:50%;transform:translateX(-50%);z-index:10000;max-width:70%;' +
    'background:#fff6dc;color:#1d1d1f;border:2px solid #d08a00;border-radius:0 0 6px 6px;padding:6px 10px;' +
    'font:14px system-ui,sans-serif;box-shadow:0 2px 6px rgba(0,0,0,.3)';
  const text = document.createElement('div');
  const recent = document.createElement('div');
  recent.style.cssText = 'font:12px ui-monospace,monospace;color:#555;margin-top:4px';
  const note = Object.assign(document.createElement('input'), { type: 'text', placeholder: 'a note for the agent' });
  note.style.cssText = 'margin-top:6px;width:60%';
  const back = Object.assign(document.createElement('button'), { type: 'button', textContent: 'Hand back' });
  back.addEventListener('click', async () => {
    await fetch(new URL('api/human', base), { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ command: 'hand_back', note: note.value }) });
    note.value = '';
  });
  const controls = document.createElement('div');
  controls.append(note, ' ', back);
  banner.append(text, recent, controls);
  document.body.append(banner);

  const show = (human) => {
    const asking = human.status === 'requested';
    banner.hidden = !(asking || human.status === 'held');
    banner.dataset.status = human.status;
    text.textContent = asking
      ? `The agent asks for a person: “${human.reason}”. Use the desktop to take it over.`
      : `${human.person} holds the desktop (asked: “${human.reason}”). Hand it back when done.`;
    recent.textContent = (human.recent_actions || []).map((r) => r.action).join(' · ');
    controls.hidden = asking;
  };
  const poll = async () => {
    try {
      const response = await fetch(new URL('api/human', base), { cache: 'no-store' });
      if (response.status === 401) return;  // a view-only page: the request is the controlling people's
      if (response.ok) show(await response.json());
    } catch { /* the server restarts, or the network changes: the next poll tells */ }
    setTimeout(poll, 1000);
  };
  poll();
}
