// boot.js — starts the console: the login form, the navigation (links with data-nav are routed
// without a reload; the URL is the page, so reload and deep links land on the same view), and the
// hook browser tests read, window.agentplaneConsole.
(function (root) {
  'use strict';

  function $(id) { return document.getElementById(id); }
  var login = $('login');
  var form = $('login-form');
  var keyInput = $('login-key');
  var errorLine = $('login-error');
  var nav = $('nav');
  var who = $('whoami');
  var logout = $('logout');

  function showChrome() {
    var a = AP.auth();
    nav.hidden = !a;
    logout.hidden = !a;
    who.textContent = !a ? '' : a.kind === 'admin' ? 'admin' : 'user ' + a.user_id;
    document.querySelectorAll('#nav a[data-admin]').forEach(function (l) { l.hidden = !AP.isAdmin(); });
  }

  AP.showLogin = function (message) {
    showChrome();
    login.hidden = false;
    errorLine.hidden = !message;
    errorLine.textContent = message || '';
    keyInput.focus();
  };

  AP.onUnauthorized = function () {
    AP.setAuth(null);
    AP.render();
    AP.showLogin('The key was refused; log in again.');
  };

  form.addEventListener('submit', function (ev) {
    ev.preventDefault();
    $('login-submit').disabled = true;
    AP.login(keyInput.value).then(function () {
      keyInput.value = '';
      login.hidden = true;
      showChrome();
      AP.render();
    }, function (err) {
      errorLine.hidden = false;
      errorLine.textContent = err.status === 401 ? 'That key is not accepted.' : String(err.message || err);
    }).then(function () { $('login-submit').disabled = false; });
  });

  logout.addEventListener('click', function () {
    AP.setAuth(null);
    AP.render();
  });

  // In-console links: a plain click is routed here; modified clicks open a tab as usual.
  document.addEventListener('click', function (ev) {
    var a = ev.target.closest && ev.target.closest('a[data-nav]');
    if (!a || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
    var url = new URL(a.href, root.location.href);
    if (url.origin !== root.location.origin || url.pathname.indexOf('/console') !== 0) return;
    ev.preventDefault();
    AP.navigate(url.pathname + url.search);
    root.scrollTo(0, 0);
  });
  root.addEventListener('popstate', function () { AP.render(); });

  root.agentplaneConsole = {
    page: function () { return AP.page; },
    state: function () { return AP.pageState ? AP.pageState() : null; },
    auth: function () { var a = AP.auth(); return a ? { kind: a.kind, user_id: a.user_id } : null; },
  };

  showChrome();
  login.hidden = !!AP.auth();
  AP.render();
})(window);
