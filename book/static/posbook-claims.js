// The claims badge under a chapter's title links to the claims table at the end of the page; following it (or
// arriving at that address) opens the table, which is otherwise closed.
(() => {
  const SECTION = "#claims-checked";   // posbook.claims.TABLE_SECTION
  const open = () => {
    const table = document.querySelector("details.posbook-claims");
    if (table) table.open = true;
  };
  document.addEventListener("click", (event) => {
    if (event.target.closest(`a.posbook-claims-badge, a[href="${SECTION}"]`)) open();
  });
  document.addEventListener("DOMContentLoaded", () => { if (location.hash === SECTION) open(); });
})();
