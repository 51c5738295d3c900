// Keeps document statuses current without reloading: every element with data-doc and
// data-field (status, progress, chunk_count, error, queue) is updated from the admin's JSON status
// endpoint, polled while any shown document is not final (ready or failed).
(function () {
    "use strict";
    const FINAL = ["ready", "failed"];
    const source = document.querySelector("[data-status-url]");
    if (!source) return;
    const url = source.dataset.statusUrl;
    let delay = 1500;

    function pendingIds() {
        const ids = new Set();
        document.querySelectorAll('[data-field="status"][data-doc]').forEach(function (el) {
            if (!FINAL.includes(el.dataset.status)) ids.add(el.dataset.doc);
        });
        return Array.from(ids);
    }

    function apply(id, doc) {
        document.querySelectorAll('[data-doc="' + id + '"]').forEach(function (el) {
            switch (el.dataset.field) {
            case "status":
                el.dataset.status = doc.status;
                el.className = "kb-badge kb-" + doc.status;
                el.textContent = doc.label;
                break;
            case "progress":
                el.title = doc.progress + "%";
                el.querySelector(".kb-progress-bar").style.width = doc.progress + "%";
                el.querySelector("span").textContent = doc.progress + "%";
                break;
            case "chunk_count":
                el.textContent = doc.chunk_count;
                break;
            case "error":
                el.textContent = doc.status === "failed" ? doc.error : "";
                break;
            case "queue":  // the place in the fair queue while pending
                el.textContent = doc.queue;
                break;
            }
        });
    }

    function poll() {
        const ids = pendingIds();
        if (!ids.length) return;
        fetch(url + "?ids=" + ids.join(","), {credentials: "same-origin"})
            .then(function (response) {
                if (!response.ok) throw new Error("status " + response.status);
                return response.json();
            })
            .then(function (data) {
                Object.entries(data.documents).forEach(function (entry) {
                    apply(entry[0], entry[1]);
                });
                delay = 1500;
            })
            .catch(function () { delay = Math.min(delay * 2, 15000); })
            .finally(function () { setTimeout(poll, delay); });
    }

    setTimeout(poll, delay);
})();
