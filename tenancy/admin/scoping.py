"""Tenant scoping of the admin: the one place that decides what a staff user sees and may do.

A staff user's tenants are their ``Membership`` rows; their role there decides what they may
do, by the same role table as the REST API (``tenancy.roles``): READ sees the tenant's knowledge
bases, documents, chunks and index and runs hit tests; WRITE_DOCUMENTS also uploads, reprocesses
and deletes documents; MANAGE_KNOWLEDGE_BASES changes, creates and deletes knowledge bases and
runs index actions (rebuild, re-embed, calibrate); MANAGE_API_KEYS manages API keys.

Superusers see and change everything. Staff users without a membership see nothing. Another
tenant's object looks exactly like a missing one: every lookup goes through the scoped
queryset, and a miss is a 404 (never Django's "perhaps it was deleted" redirect, which would
differ from nothing at all only in wording).

Django's per-model permissions are not consulted for these models: the membership role is the
single source of truth, as in the API.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.http import Http404, HttpRequest

from tenancy import selectors
from tenancy.models import Tenant
from tenancy.roles import Permission, role_permissions

_CACHE_ATTR = "_admin_tenant_roles"


def tenant_roles(request: HttpRequest) -> dict[int, str]:
    """``{tenant id: role}`` of the requesting user, read once per request."""
    roles = getattr(request, _CACHE_ATTR, None)
    if roles is None:
        roles = selectors.tenant_roles(request.user)
        setattr(request, _CACHE_ATTR, roles)
    return roles


def tenant_ids(request: HttpRequest, can: Permission = Permission.READ) -> list[int] | None:
    """The tenants in which the user may do ``can``; None means every tenant (superuser)."""
    if request.user.is_superuser:
        return None
    return sorted(
        tid for tid, role in tenant_roles(request).items() if can in role_permissions(role)
    )


def allowed(request: HttpRequest, can: Permission, tenant_id: int | None = None) -> bool:
    """Whether the user may do ``can`` in that tenant (or, without one, in any tenant)."""
    ids = tenant_ids(request, can)
    if ids is None:
        return True
    return bool(ids) if tenant_id is None else tenant_id in ids


class TenantScopedAdmin(admin.ModelAdmin):
    """A ModelAdmin whose rows, choices and permissions are limited to the user's tenants.

    ``tenant_path`` is the lookup from the model to its tenant id ("tenant", or "pk" for the
    Tenant model itself). ``view_needs``, ``add_needs``, ``change_needs`` and ``delete_needs``
    are what each operation requires of the user's role in the object's tenant; None forbids
    it (read-only). ``action_needs`` names what the admin's own action permissions (an
    action's ``permissions=[...]`` beyond Django's four) require.

    An action runs only when the user may do it in the tenant of every object it is given
    (``response_action``): a selection naming an object that is not theirs is a 404, one
    their role does not allow there a 403, and nothing of it is done.
    """

    tenant_path = "tenant"
    view_needs: Permission = Permission.READ
    add_needs: Permission | None = None
    change_needs: Permission | None = None
    delete_needs: Permission | None = None
    action_needs: dict[str, Permission] = {}

    # ------------------------------------------------------------------ rows

    def get_queryset(self, request: HttpRequest) -> models.QuerySet:
        return self.scope(request, super().get_queryset(request), self.view_needs)

    def scope(
        self, request: HttpRequest, queryset: models.QuerySet, can: Permission = Permission.READ
    ):
        ids = tenant_ids(request, can)
        if ids is None:
            return queryset
        return queryset.filter(**{f"{self.tenant_path}__in": ids})

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None):
        """The object through the scoped queryset; a missing or foreign one is a 404."""
        obj = super().get_object(request, object_id, from_field)
        if obj is None:
            raise Http404(f"No {self.opts.verbose_name} with id {object_id!r}.")
        return obj

    def scoped_object_or_404(
        self, request: HttpRequest, object_id, can: Permission = Permission.READ
    ):
        """For the admin's own views: the object if the user may do ``can`` with it, a 404
        if it is missing or foreign, a 403 if it is theirs but their role does not allow it."""
        obj = self.get_object(request, str(object_id))
        if not allowed(request, can, self.tenant_id_of(obj)):
            raise PermissionDenied(f"Your role in {self.tenant_of(obj)} does not allow this.")
        return obj

    def tenant_id_of(self, obj: models.Model) -> int:
        return obj.pk if self.tenant_path == "pk" else getattr(obj, f"{self.tenant_path}_id")

    def tenant_of(self, obj: models.Model) -> Tenant:
        return obj if self.tenant_path == "pk" else getattr(obj, self.tenant_path)

    # ------------------------------------------------------------------ permissions

    def has_module_permission(self, request: HttpRequest) -> bool:
        return allowed(request, self.view_needs)

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may(request, self.view_needs, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._may(request, self.add_needs, None)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may(request, self.change_needs, obj)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may(request, self.delete_needs, obj)

    def _may(self, request: HttpRequest, can: Permission | None, obj) -> bool:
        if can is None:
            return False
        return allowed(request, can, None if obj is None else self.tenant_id_of(obj))

    def needs(self, permission_name: str) -> Permission | None:
        """What an action permission ("delete", "change", or one of ``action_needs``)
        requires of the role (None: nobody but a superuser)."""
        builtin = {
            "view": self.view_needs,
            "add": self.add_needs,
            "change": self.change_needs,
            "delete": self.delete_needs,
        }
        if permission_name in builtin:
            return builtin[permission_name]
        return self.action_needs[permission_name]

    # ------------------------------------------------------------------ actions

    def response_action(self, request: HttpRequest, queryset: models.QuerySet):
        """Run the posted action only if the user may do it in the tenant of every object of
        the selection (or, for "select all", of the whole list): all or nothing."""
        action = self._posted_action(request)
        if action is not None:
            selection = queryset
            if request.POST.get("select_across") != "1":
                selection = self._selected(request, queryset)
            for name in getattr(action, "allowed_permissions", ()):
                self._ensure_allowed(request, self.needs(name), selection)
        return super().response_action(request, queryset)

    def _posted_action(self, request: HttpRequest):
        """The action function the POST names (as Django's ``response_action`` picks it), or
        None when it names none the user is offered (Django then says so)."""
        try:
            index = int(request.POST.get("index", 0))
            name = request.POST.getlist("action")[index]
        except (ValueError, IndexError):
            return None
        found = self.get_actions(request).get(name)
        return found[0] if found else None

    def _selected(self, request: HttpRequest, queryset: models.QuerySet) -> models.QuerySet:
        """The selected rows of ``queryset``; a 404 when an id names none of them (missing,
        malformed, or another tenant's)."""
        raw = set(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME))
        if not raw:
            return queryset.none()  # Django answers "Items must be selected"
        ids = {self._pk_or_404(value) for value in raw}
        found = queryset.filter(pk__in=ids)
        missing = len(ids) - found.order_by().values("pk").distinct().count()
        if missing:
            raise Http404(f"{missing} of the selected {self.opts.verbose_name_plural} not found.")
        return found

    def _pk_or_404(self, value: str):
        """A selected id as the primary key's value, checked against its range (the
        database's integer bounds), else a 404: no row can have it."""
        pk = self.opts.pk
        try:
            parsed = pk.to_python(value)
            pk.run_validators(parsed)
        except ValidationError:
            raise Http404(f"No {self.opts.verbose_name} with id {value!r}.") from None
        return parsed

    def _ensure_allowed(
        self, request: HttpRequest, can: Permission | None, selection: models.QuerySet
    ) -> None:
        if request.user.is_superuser:
            return
        tenants = set(selection.order_by().values_list(self.tenant_path, flat=True).distinct())
        permitted = set(tenant_ids(request, can)) if can is not None else set()
        refused = tenants - permitted
        if refused:
            names = ", ".join(Tenant.objects.filter(pk__in=refused).values_list("name", flat=True))
            raise PermissionDenied(f"Your role in {names} does not allow this action.")

    def delete_queryset(self, request: HttpRequest, queryset: models.QuerySet) -> None:
        super().delete_queryset(request, self.scope(request, queryset, self.delete_needs))

    # ------------------------------------------------------------------ choices

    def get_changeform_initial_data(self, request: HttpRequest) -> dict:
        """A user who can add in one tenant only (a superuser: who is a member of one only)
        finds it chosen."""
        initial = super().get_changeform_initial_data(request)
        ids = tenant_ids(request, self.add_needs or Permission.MANAGE_KNOWLEDGE_BASES)
        if ids is None:
            ids = list(tenant_roles(request))
        if self.tenant_path == "tenant" and len(ids) == 1:
            initial.setdefault("tenant", ids[0])
        return initial

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        kwargs.setdefault("queryset", self.choices_for(db_field.related_model, request))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        kwargs.setdefault("queryset", self.choices_for(db_field.related_model, request))
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def choices_for(self, model: type[models.Model], request: HttpRequest) -> models.QuerySet:
        """Tenants the user may add or change things in, and their tenants' knowledge bases."""
        ids = tenant_ids(request, self.add_needs or self.change_needs or Permission.READ)
        queryset = model._default_manager.all()
        if ids is None:
            return queryset
        if model is Tenant:
            return queryset.filter(pk__in=ids)
        if any(f.name == "tenant" for f in model._meta.fields):
            return queryset.filter(tenant_id__in=ids)
        return queryset
