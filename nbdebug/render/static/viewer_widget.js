// nbdebug live memory viewer: the ES module of snap.view()'s widget (anywidget).  Python puts viewer.js (which
// declares nbdmemViewer) before this module's text.  The widget's element gets the same panel as the notebook's
// HTML output, and the panel asks the kernel through the widget model: model.send(request), the answer comes back
// as a custom message with the same seq.  Nothing here looks for other outputs or for the notebook's page: the
// live view works wherever widgets do (JupyterLab, Notebook 7, VS Code, Colab).
function makeLink(model){
  let seq = 0;
  const waiting = new Map();
  const onMsg = msg => {
    if (!msg || typeof msg !== 'object') return;
    const done = waiting.get(msg.seq);
    if (done){ waiting.delete(msg.seq); done(msg); }
  };
  model.on('msg:custom', onMsg);
  function ask(req, ms){
    req.seq = ++seq;
    return new Promise(res => {
      const timer = setTimeout(() => { waiting.delete(req.seq); res({seq: req.seq, error: 'no answer from the kernel'}); },
                               ms || 30000);
      waiting.set(req.seq, a => { clearTimeout(timer); res(a); });
      try { model.send(req); } catch (e) { clearTimeout(timer); waiting.delete(req.seq); res({seq: req.seq, error: String(e)}); }
    });
  }
  // one question for every panel of the widget: does a kernel answer?  A notebook reopened with its widget state
  // saved shows the widget with no kernel behind it; a kernel busy with the next cell ("run all") answers late,
  // and then the panels turn live
  let hello = null, answered = false;
  const late = [];
  function ready(){
    if (hello) return hello;
    const seq0 = seq + 1;
    waiting.set(seq0, () => { answered = true; for (const f of late.splice(0)) f(); });
    hello = new Promise(res => {
      setTimeout(() => res(answered), 8000);
      late.push(() => res(true));
    });
    seq = seq0;
    try { model.send({op: 'hello', seq: seq0}); } catch (e) { /* no kernel: the panels keep their own events */ }
    return hello;
  }
  return {
    ask: req => ask(req),
    ready,
    onLate: f => { if (answered) f(); else late.push(f); },
    close: () => model.off('msg:custom', onMsg),
  };
}

function render({model, el}){
  const token = model.get('token');
  const box = document.createElement('div');
  box.className = 'nbdmem-widget';
  box.dataset.live = token;
  box.innerHTML = model.get('html');  // scripts set this way do not run: the panels are started below
  el.appendChild(box);
  const link = makeLink(model);
  for (const panel of box.querySelectorAll('.nbd-mem')) nbdmemViewer(panel, link);
  for (const multi of box.querySelectorAll('.nbd-mem-multi')) nbdmemViewer(multi, link);
  return () => link.close();
}

export default { render };
