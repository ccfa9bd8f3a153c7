// PLACEHOLDER (see report.html here): not the report page's script. It only
// checks that the embedded data parses and says so in the page.
'use strict';
(function () {
  const data = JSON.parse(document.getElementById('retain-data').textContent);
  const p = document.createElement('p');
  p.textContent = 'schema: ' + data.schema;
  document.body.appendChild(p);
})();
